// The translation unit that makes the tests' precompiled header (tests/CMakeLists.txt,
// mlip_test_pch; docs/architecture.md "Build time"): it holds nothing of its own.

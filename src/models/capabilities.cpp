#include "models/capabilities.h"

#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include "error.h"

namespace mlip::models {
namespace {

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

std::string Capabilities::to_text() const {
  std::ostringstream o;
  o << std::setprecision(std::numeric_limits<double>::max_digits10);
  o << "model_type: " << model_type << "\n"
    << "type_map: " << joined(type_map) << "\n"
    << "dtype: " << dtype << "\n"
    << "cutoff: " << cutoff << "\n"
    << "message_layers: " << message_layers << "\n"
    << "devices: " << joined(devices) << "\n"
    << "inference: " << joined(inference) << "\n";
  return o.str();
}

Capabilities Capabilities::parse(const std::string& text, const std::string& source) {
  Capabilities c;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const auto colon = line.find(':');
    const std::string where = source + ": capabilities line " + std::to_string(number);
    if (colon == std::string::npos) throw Error(where + ": expected \"key: value\", got \"" + line + "\"");
    const std::string key = line.substr(0, colon);
    std::string value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    seen.insert(key);
    try {
      if (key == "model_type") c.model_type = value;
      else if (key == "type_map") c.type_map = words_of(value);
      else if (key == "dtype") c.dtype = value;
      else if (key == "cutoff") c.cutoff = std::stod(value);
      else if (key == "message_layers") c.message_layers = std::stoll(value);
      else if (key == "devices") c.devices = words_of(value);
      else if (key == "inference") c.inference = words_of(value);
      // Keys of a later mlip are skipped: what this one needs is checked below.
    } catch (const std::exception&) {
      throw Error(where + ": " + key + ": expected a number, got \"" + value + "\"");
    }
  }
  for (const char* key : {"model_type", "type_map", "dtype", "cutoff", "message_layers", "devices"})
    if (seen.count(key) == 0) throw Error(source + ": capabilities: no '" + std::string(key) + "' line");
  if (c.dtype != "float64" && c.dtype != "float32")
    throw Error(source + ": capabilities: dtype: expected float64 or float32, got \"" + c.dtype + "\"");
  if (!(c.cutoff > 0)) throw Error(source + ": capabilities: cutoff: expected a positive number of Å");
  if (c.message_layers < 1) throw Error(source + ": capabilities: message_layers: expected at least 1");
  if (c.type_map.empty()) throw Error(source + ": capabilities: type_map: expected at least one type name");
  return c;
}

}  // namespace mlip::models

// A checkpoint state's chat template (chat_state.hpp).
#include "smelt/tokenizer/chat_state.hpp"

namespace smelt {

namespace {
std::string string_or_empty(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}
}  // namespace

nlohmann::ordered_json StateChatTemplate::extra() const {
  nlohmann::ordered_json e = nlohmann::ordered_json::object();
  if (!bos_token.empty()) e["bos_token"] = bos_token;
  if (!eos_token.empty()) e["eos_token"] = eos_token;
  return e;
}

bool chat_template_in_state(const nlohmann::json& state, StateChatTemplate& out) {
  out = StateChatTemplate{};
  if (!state.is_object()) return false;
  const nlohmann::json* src = nullptr;
  if (state.contains("chat") && state["chat"].is_object() && state["chat"].contains("template") &&
      state["chat"]["template"].is_string()) {
    src = &state["chat"];
    out.source = (*src)["template"].get<std::string>();
    out.origin = "the template the model was fine-tuned with";
  } else if (state.contains("import") && state["import"].is_object() && state["import"].contains("chat_template") &&
             state["import"]["chat_template"].is_string()) {
    src = &state["import"];
    out.source = (*src)["chat_template"].get<std::string>();
    out.origin = "the imported model's chat_template";
  }
  if (!src) return false;
  out.bos_token = string_or_empty(*src, "bos_token");
  out.eos_token = string_or_empty(*src, "eos_token");
  return true;
}

}  // namespace smelt

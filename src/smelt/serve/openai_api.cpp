// OpenAI-compatible request parsing and response building (openai_api.hpp). Field rules follow
// the OpenAI API reference; where it is silent or we differ (top_k, ignore_eos, token-id prompts,
// cut max_tokens) docs/serve.md says so.
#include "smelt/serve/openai_api.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

namespace smelt {

using json = nlohmann::json;

namespace {

ApiError bad(std::string param, std::string message, std::string code = "invalid_value") {
  ApiError e;
  e.status = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number with a fraction";
    default: return "a number";
  }
}

ApiError wrong_type(const std::string& param, const char* want, const json& v) {
  return bad(param, fmt::format("'{}' must be {}, got {}", param, want, type_name(v)), "invalid_type");
}

// An integer field: JSON integers, or numbers with no fraction (16.0), within int64.
bool get_int(const json& v, const std::string& param, int64_t& out, ApiError& err) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t)std::numeric_limits<int64_t>::max()) {
      err = bad(param, fmt::format("'{}' is too large", param));
      return false;
    }
    out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
      out = (int64_t)d;
      return true;
    }
  }
  err = wrong_type(param, "an integer", v);
  return false;
}

bool get_number(const json& v, const std::string& param, double& out, ApiError& err) {
  if (!v.is_number()) {
    err = wrong_type(param, "a number", v);
    return false;
  }
  out = v.get<double>();
  return true;
}

bool get_bool(const json& v, const std::string& param, bool& out, ApiError& err) {
  if (!v.is_boolean()) {
    err = wrong_type(param, "a boolean", v);
    return false;
  }
  out = v.get<bool>();
  return true;
}

// The field, or nullptr when absent or null (OpenAI treats null as "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool parse_body(std::string_view body, json& j, ApiError& err) {
  j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // parse again for the message (rare path: the body was bad anyway)
    std::string why = "the body is not valid JSON";
    try {
      json again = json::parse(body.begin(), body.end());
    } catch (const json::parse_error& e) {
      why = fmt::format("the body is not valid JSON (byte {}): {}", e.byte, e.what());
    } catch (const json::exception& e) {  // out_of_range: a number beyond double (1e400)
      why = fmt::format("the body is not valid JSON: {}", e.what());
    }
    err = bad("", why, "invalid_json");
    return false;
  }
  if (!j.is_object()) {
    err = bad("", fmt::format("the body must be a JSON object, got {}", type_name(j)), "invalid_type");
    return false;
  }
  return true;
}

bool parse_ids(const json& arr, const std::string& param, int vocab, std::vector<int32_t>& out, ApiError& err) {
  out.clear();
  for (size_t i = 0; i < arr.size(); i++) {
    const std::string p = fmt::format("{}[{}]", param, i);
    int64_t id = 0;
    if (!get_int(arr[i], p, id, err)) return false;
    if (id < 0 || id >= vocab) {
      err = bad(param, fmt::format("'{}' is {}: token ids lie in [0, {})", p, id, vocab));
      return false;
    }
    out.push_back((int32_t)id);
  }
  return true;
}

bool parse_prompt(const json& body, const ApiContext& ctx, ApiRequest& r, ApiError& err) {
  const json* p = field(body, "prompt");
  if (!p) {
    err = bad("prompt", "'prompt' is required (a string, an array of token ids, or an array of one of either)",
              "missing_required_parameter");
    return false;
  }
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    return true;
  }
  if (!p->is_array()) {
    err = wrong_type("prompt", "a string or an array of token ids", *p);
    return false;
  }
  if (p->empty()) {
    err = bad("prompt", "'prompt' is an empty array");
    return false;
  }
  const json& first = (*p)[0];
  if (first.is_string() || first.is_array()) {  // a batch of prompts: only one is served (n = 1)
    if (p->size() != 1) {
      err = bad("prompt", fmt::format("'prompt' holds {} prompts; this server completes one prompt per "
                                      "request (send them as separate requests)", p->size()));
      return false;
    }
    if (first.is_string()) {
      r.prompt = first.get<std::string>();
      return true;
    }
    if (first.empty()) {
      err = bad("prompt", "'prompt[0]' is an empty array");
      return false;
    }
    r.prompt_is_ids = true;
    if (!parse_ids(first, "prompt[0]", ctx.vocab_size, r.prompt_ids, err)) {
      err.param = "prompt";
      return false;
    }
    return true;
  }
  r.prompt_is_ids = true;
  if (!parse_ids(*p, "prompt", ctx.vocab_size, r.prompt_ids, err)) {
    err.param = "prompt";
    return false;
  }
  return true;
}

bool parse_content(const json& c, const std::string& param, std::string& out, ApiError& err) {
  if (c.is_string()) {
    out = c.get<std::string>();
    return true;
  }
  if (!c.is_array()) {
    err = wrong_type(param, "a string or an array of text parts", c);
    return false;
  }
  out.clear();
  for (size_t i = 0; i < c.size(); i++) {
    const json& part = c[i];
    const std::string pp = fmt::format("{}[{}]", param, i);
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      err = bad(param, fmt::format("'{}' must be {{\"type\": \"text\", \"text\": string}} (only text parts "
                                   "are supported)", pp));
      return false;
    }
    out += part["text"].get<std::string>();
  }
  return true;
}

bool parse_messages(const json& body, ApiRequest& r, ApiError& err) {
  const json* m = field(body, "messages");
  if (!m) {
    err = bad("messages", "'messages' is required (an array of {\"role\", \"content\"})", "missing_required_parameter");
    return false;
  }
  if (!m->is_array()) {
    err = wrong_type("messages", "an array", *m);
    return false;
  }
  if (m->empty()) {
    err = bad("messages", "'messages' is empty: at least one message is needed");
    return false;
  }
  for (size_t i = 0; i < m->size(); i++) {
    const json& msg = (*m)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!msg.is_object()) {
      err = wrong_type(p, "an object", msg);
      err.param = "messages";
      return false;
    }
    ChatMessage cm;
    const json* role = field(msg, "role");
    if (!role || !role->is_string()) {
      err = bad("messages", fmt::format("'{}.role' must be \"system\", \"user\" or \"assistant\"", p));
      return false;
    }
    cm.role = role->get<std::string>();
    if (cm.role == "developer") cm.role = "system";  // OpenAI's newer name for the system message
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant") {
      err = bad("messages", fmt::format("'{}.role' is \"{}\": want \"system\", \"user\" or \"assistant\" "
                                        "(tools are not supported)", p, cm.role));
      return false;
    }
    const json* content = field(msg, "content");
    if (!content) {
      err = bad("messages", fmt::format("'{}.content' is required (a string)", p), "missing_required_parameter");
      return false;
    }
    if (!parse_content(*content, p + ".content", cm.content, err)) {
      err.param = "messages";
      return false;
    }
    r.messages.push_back(std::move(cm));
  }
  return true;
}

bool parse_stop(const json& body, ApiRequest& r, ApiError& err) {
  const json* s = field(body, "stop");
  if (!s) return true;
  auto add = [&](const json& v, const std::string& p) {
    if (!v.is_string()) {
      err = wrong_type(p, "a string", v);
      err.param = "stop";
      return false;
    }
    if (!v.get<std::string>().empty()) r.stop.push_back(v.get<std::string>());  // "" would match at once
    return true;
  };
  if (s->is_string()) return add(*s, "stop");
  if (!s->is_array()) {
    err = wrong_type("stop", "a string or an array of strings", *s);
    return false;
  }
  if ((int)s->size() > kApiMaxStop) {
    err = bad("stop", fmt::format("'stop' has {} strings; at most {}", s->size(), kApiMaxStop));
    return false;
  }
  for (size_t i = 0; i < s->size(); i++)
    if (!add((*s)[i], fmt::format("stop[{}]", i))) return false;
  return true;
}

bool parse_sampling(const json& body, const ApiContext& ctx, ApiRequest& r, ApiError& err) {
  if (const json* v = field(body, "temperature")) {
    double t;
    if (!get_number(*v, "temperature", t, err)) return false;
    if (!(t >= 0 && t <= 2)) {
      err = bad("temperature", fmt::format("'temperature' is {}: want 0..2 (0 is greedy)", t));
      return false;
    }
    r.sampling.temperature = (float)t;
  }
  if (const json* v = field(body, "top_p")) {
    double p;
    if (!get_number(*v, "top_p", p, err)) return false;
    if (!(p > 0 && p <= 1)) {
      err = bad("top_p", fmt::format("'top_p' is {}: want a value in (0, 1]", p));
      return false;
    }
    r.sampling.top_p = (float)p;
  }
  if (const json* v = field(body, "top_k")) {
    int64_t k;
    if (!get_int(*v, "top_k", k, err)) return false;
    if (k < 0 || k > ctx.vocab_size) {
      err = bad("top_k", fmt::format("'top_k' is {}: want 0 (off) .. {} (the vocabulary)", k, ctx.vocab_size));
      return false;
    }
    r.sampling.top_k = (int)k;
  }
  if (const json* v = field(body, "seed")) {
    int64_t s;
    if (!get_int(*v, "seed", s, err)) return false;
    r.sampling.seed = (uint64_t)s;
    r.seed_given = true;
  } else {
    // OpenAI: no seed, a fresh draw each request
    std::random_device rd;
    r.sampling.seed = ((uint64_t)rd() << 32) ^ rd();
  }
  // OpenAI's penalties on the completion's tokens so far (serve/sampling.hpp)
  for (const auto& [name, to] : {std::pair{"presence_penalty", &r.sampling.presence_penalty},
                                  std::pair{"frequency_penalty", &r.sampling.frequency_penalty}}) {
    if (const json* v = field(body, name)) {
      double d;
      if (!get_number(*v, name, d, err)) return false;
      if (!(d >= -2.0 && d <= 2.0)) {
        err = bad(name, fmt::format("'{}' is {}: want a value in [-2, 2]", name, d));
        return false;
      }
      *to = (float)d;
    }
  }
  if (const json* v = field(body, "logit_bias")) {
    if (!v->is_object()) {
      err = wrong_type("logit_bias", "an object", *v);
      return false;
    }
    if (!v->empty()) {
      err = bad("logit_bias", "'logit_bias' is not supported", "unsupported_parameter");
      return false;
    }
  }
  return true;
}

bool parse_common(const json& body, const ApiContext& ctx, ApiRequest& r, ApiError& err) {
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) {
      err = wrong_type("model", "a string", *m);
      return false;
    }
    r.model = m->get<std::string>();
    if (r.model != ctx.model_name) {
      err = bad("model", fmt::format("The model '{}' does not exist; this server serves '{}'", r.model,
                                     ctx.model_name), "model_not_found");
      err.status = 404;
      return false;
    }
  }
  if (const json* v = field(body, "n")) {
    int64_t n;
    if (!get_int(*v, "n", n, err)) return false;
    if (n != 1) {
      err = bad("n", fmt::format("'n' is {}: only 1 completion per request is supported", n));
      return false;
    }
  }
  if (const json* v = field(body, "best_of")) {
    int64_t n;
    if (!get_int(*v, "best_of", n, err)) return false;
    if (n != 1) {
      err = bad("best_of", fmt::format("'best_of' is {}: only 1 is supported", n));
      return false;
    }
  }
  for (const char* name : {"tools", "functions"}) {
    if (const json* v = field(body, name); v && !(v->is_array() && v->empty())) {
      err = bad(name, fmt::format("'{}' is not supported (no tool calling)", name), "unsupported_parameter");
      return false;
    }
  }
  if (const json* v = field(body, "stream") ; v && !get_bool(*v, "stream", r.stream, err)) return false;
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) {
      err = wrong_type("stream_options", "an object", *v);
      return false;
    }
    if (!r.stream) {
      err = bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
      return false;
    }
    if (const json* u = field(*v, "include_usage"); u && !get_bool(*u, "stream_options.include_usage", r.include_usage, err)) {
      err.param = "stream_options";
      return false;
    }
  }
  if (!parse_sampling(body, ctx, r, err) || !parse_stop(body, r, err)) return false;
  if (const json* v = field(body, "ignore_eos"); v && !get_bool(*v, "ignore_eos", r.ignore_eos, err)) return false;
  if (const json* v = field(body, "return_token_ids"); v && !get_bool(*v, "return_token_ids", r.return_token_ids, err))
    return false;
  // max_tokens (chat: max_completion_tokens first, as OpenAI)
  const char* names[2] = {"max_tokens", nullptr};
  if (r.route == ApiRoute::kChat) names[0] = "max_completion_tokens", names[1] = "max_tokens";
  for (const char* name : names) {
    if (!name) continue;
    const json* v = field(body, name);
    if (!v) continue;
    int64_t n;
    if (!get_int(*v, name, n, err)) return false;
    if (n < 1 || n > ctx.ctx) {
      err = bad(name, fmt::format("'{}' is {}: want 1..{} (the context, prompt included)", name, n, ctx.ctx));
      return false;
    }
    r.max_tokens = (int)n;
    r.max_tokens_param = name;
    break;
  }
  return true;
}

json null_or(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

json api_error_body(const ApiError& e) {
  return {{"error", {{"message", e.message}, {"type", e.type}, {"param", null_or(e.param)}, {"code", null_or(e.code)}}}};
}

std::string api_dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool api_parse_request(ApiRoute route, std::string_view body, const ApiContext& ctx, ApiRequest& r, ApiError& err) {
  r = ApiRequest{};
  r.route = route;
  json j;
  if (!parse_body(body, j, err)) return false;
  if (!parse_common(j, ctx, r, err)) return false;
  if (route == ApiRoute::kCompletions) {
    if (!parse_prompt(j, ctx, r, err)) return false;
    if (const json* v = field(j, "echo"); v && !get_bool(*v, "echo", r.echo, err)) return false;
    if (const json* v = field(j, "logprobs")) {
      int64_t n;
      if (!get_int(*v, "logprobs", n, err)) return false;
      if (n < 0 || n > kApiMaxLogprobs) {
        err = bad("logprobs", fmt::format("'logprobs' is {}: want 0..{}", n, kApiMaxLogprobs));
        return false;
      }
      r.logprobs = true;
      r.top_logprobs = (int)n;
    }
    if (r.echo && r.logprobs) {
      err = bad("echo", "'echo' with 'logprobs' is not supported (the prompt's log probabilities are not computed)",
                "unsupported_parameter");
      return false;
    }
  } else {
    if (!parse_messages(j, r, err)) return false;
    if (const json* v = field(j, "logprobs"); v && !get_bool(*v, "logprobs", r.logprobs, err)) return false;
    if (const json* v = field(j, "top_logprobs")) {
      int64_t n;
      if (!get_int(*v, "top_logprobs", n, err)) return false;
      if (n < 0 || n > kApiMaxLogprobs) {
        err = bad("top_logprobs", fmt::format("'top_logprobs' is {}: want 0..{}", n, kApiMaxLogprobs));
        return false;
      }
      if (!r.logprobs) {
        err = bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        return false;
      }
      r.top_logprobs = (int)n;
    }
  }
  return true;
}

bool api_build_generation(const ApiRequest& r, const Tokenizer& tok, const ChatTemplate& tmpl, const ApiContext& ctx,
                          GenRequest& gen, ApiError& err) {
  const char* param = r.route == ApiRoute::kChat ? "messages" : "prompt";
  gen.prompt.clear();
  if (r.route == ApiRoute::kChat) {
    std::vector<uint32_t> ids;
    chat_template_encode(tmpl, tok, r.messages, ids);
    gen.prompt.assign(ids.begin(), ids.end());
  } else if (r.prompt_is_ids) {
    gen.prompt = r.prompt_ids;
  } else {
    std::vector<uint32_t> ids;
    tok.encode(r.prompt, ids, /*allow_special=*/true);
    gen.prompt.assign(ids.begin(), ids.end());
  }
  if (gen.prompt.empty()) {
    const auto eod = tok.eod_id();
    if (!eod) {
      err = bad(param, fmt::format("'{}' is empty and the tokenizer has no end-of-document token to start from", param));
      return false;
    }
    gen.prompt.push_back((int32_t)*eod);
  }
  const int n = (int)gen.prompt.size();
  if (n >= ctx.ctx) {
    err = bad(param, fmt::format("the {} is {} tokens; the context is {} tokens, which leaves no room to generate "
                                 "(shorten it, or start the server with a larger --ctx)", param, n, ctx.ctx),
              "context_length_exceeded");
    return false;
  }
  int want = r.max_tokens > 0 ? r.max_tokens
                              : (r.route == ApiRoute::kChat ? ctx.ctx - n : kApiDefaultCompletionTokens);
  gen.max_tokens = std::min(want, ctx.ctx - n);  // the completion ends at the context: "length"
  gen.sampling = r.sampling;
  gen.stop = r.stop;
  if (r.route == ApiRoute::kChat)
    for (const auto& s : tmpl.stop) gen.stop.push_back(s);
  // the engine computes log probabilities only when asked for top entries: ask for at least one
  // (the chosen token's own is wanted even with top_logprobs 0); the responses keep top_logprobs
  gen.logprobs = r.logprobs ? std::max(1, r.top_logprobs) : 0;
  gen.ignore_eos = r.ignore_eos;
  return true;
}

bool api_parse_tokenize(std::string_view body, std::string& content, bool& with_pieces, ApiError& err) {
  json j;
  if (!parse_body(body, j, err)) return false;
  const json* c = field(j, "content");
  if (!c) {
    err = bad("content", "'content' is required (a string)", "missing_required_parameter");
    return false;
  }
  if (!c->is_string()) {
    err = wrong_type("content", "a string", *c);
    return false;
  }
  content = c->get<std::string>();
  with_pieces = false;
  if (const json* v = field(j, "with_pieces"); v && !get_bool(*v, "with_pieces", with_pieces, err)) return false;
  return true;
}

bool api_parse_detokenize(std::string_view body, int vocab_size, std::vector<int32_t>& ids, ApiError& err) {
  json j;
  if (!parse_body(body, j, err)) return false;
  const json* t = field(j, "tokens");
  if (!t) {
    err = bad("tokens", "'tokens' is required (an array of token ids)", "missing_required_parameter");
    return false;
  }
  if (!t->is_array()) {
    err = wrong_type("tokens", "an array of token ids", *t);
    return false;
  }
  if (!parse_ids(*t, "tokens", vocab_size, ids, err)) {
    err.param = "tokens";
    return false;
  }
  return true;
}

ApiMeta api_meta_new(ApiRoute route, const std::string& model) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  ApiMeta m;
  m.id = fmt::format("{}-{:016x}{:08x}", route == ApiRoute::kChat ? "chatcmpl" : "cmpl", rng(), (uint32_t)rng());
  m.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.model = model;
  return m;
}

const char* api_finish_reason(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    default: return "aborted";
  }
}

json api_usage(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::string api_token_text(const Tokenizer& tok, int32_t id) {
  std::string s;
  uint32_t u = (uint32_t)id;
  tok.decode(&u, 1, s);
  return s;
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back((int)c);
  return b;
}

// The chat shape of one token: {"token","logprob","bytes","top_logprobs":[...]}.
json chat_logprob(const TokenEvent& ev, int top, const Tokenizer& tok) {
  const std::string t = api_token_text(tok, ev.id);
  json tops = json::array();
  for (int i = 0; i < top && i < (int)ev.top.size(); i++) {
    const std::string tt = api_token_text(tok, ev.top[i].id);
    tops.push_back({{"token", tt}, {"logprob", ev.top[i].logprob}, {"bytes", bytes_of(tt)}});
  }
  return {{"token", t}, {"logprob", ev.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", tops}};
}

// The legacy completions shape over events [0, n): parallel arrays.
json completion_logprobs(const TokenEvent* ev, size_t n, int top, const Tokenizer& tok, size_t text_offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = text_offset;
  for (size_t i = 0; i < n; i++) {
    tokens.push_back(api_token_text(tok, ev[i].id));
    lps.push_back(ev[i].logprob);
    json t = json::object();
    for (int k = 0; k < top && k < (int)ev[i].top.size(); k++) t[api_token_text(tok, ev[i].top[k].id)] = ev[i].top[k].logprob;
    tops.push_back(t);
    offs.push_back(off);
    off += ev[i].text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json head(const ApiMeta& m, const char* object) {
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
}

}  // namespace

json api_response(const ApiRequest& r, const ApiMeta& m, const GenResult& res, const std::vector<TokenEvent>& events,
                  const std::vector<int32_t>& prompt, const Tokenizer& tok) {
  json choice = {{"index", 0}, {"finish_reason", api_finish_reason(res.finish)}};
  json j;
  if (r.route == ApiRoute::kChat) {
    j = head(m, "chat.completion");
    choice["message"] = {{"role", "assistant"}, {"content", res.text}};
    if (r.logprobs) {
      json content = json::array();
      for (const auto& ev : events) content.push_back(chat_logprob(ev, r.top_logprobs, tok));
      choice["logprobs"] = {{"content", content}};
    } else {
      choice["logprobs"] = nullptr;
    }
  } else {
    j = head(m, "text_completion");
    std::string text = res.text;
    size_t offset = 0;
    if (r.echo) {
      std::string p;
      std::vector<uint32_t> ids(prompt.begin(), prompt.end());
      tok.decode(ids.data(), ids.size(), p);
      offset = p.size();
      text = p + text;
    }
    choice["text"] = text;
    choice["logprobs"] = r.logprobs ? completion_logprobs(events.data(), events.size(), r.top_logprobs, tok, offset)
                                    : json(nullptr);
  }
  if (r.return_token_ids) {
    choice["token_ids"] = res.ids;
    j["prompt_token_ids"] = prompt;
  }
  j["choices"] = json::array({choice});
  j["usage"] = api_usage(res.prompt_tokens, res.completion_tokens);
  return j;
}

namespace {

json chunk(const ApiRequest& r, const ApiMeta& m, json choice) {
  json j = head(m, r.route == ApiRoute::kChat ? "chat.completion.chunk" : "text_completion");
  choice["index"] = 0;
  j["choices"] = json::array({choice});
  if (r.include_usage) j["usage"] = nullptr;  // OpenAI: null on every chunk but the usage one
  return j;
}

}  // namespace

json api_chunk_first(const ApiRequest& r, const ApiMeta& m, const std::string& echo_text) {
  if (r.route == ApiRoute::kChat)
    return chunk(r, m, {{"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
  return chunk(r, m, {{"text", echo_text}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
}

json api_chunk_token(const ApiRequest& r, const ApiMeta& m, const TokenEvent& ev, const Tokenizer& tok, size_t text_offset) {
  if (r.route == ApiRoute::kChat) {
    json lp = r.logprobs ? json{{"content", json::array({chat_logprob(ev, r.top_logprobs, tok)})}} : json(nullptr);
    return chunk(r, m, {{"delta", {{"content", ev.text}}}, {"logprobs", lp}, {"finish_reason", nullptr}});
  }
  json lp = r.logprobs ? completion_logprobs(&ev, 1, r.top_logprobs, tok, text_offset) : json(nullptr);
  return chunk(r, m, {{"text", ev.text}, {"logprobs", lp}, {"finish_reason", nullptr}});
}

json api_chunk_last(const ApiRequest& r, const ApiMeta& m, const std::string& tail, FinishReason finish) {
  if (r.route == ApiRoute::kChat) {
    json delta = tail.empty() ? json::object() : json{{"content", tail}};
    return chunk(r, m, {{"delta", delta}, {"logprobs", nullptr}, {"finish_reason", api_finish_reason(finish)}});
  }
  return chunk(r, m, {{"text", tail}, {"logprobs", nullptr}, {"finish_reason", api_finish_reason(finish)}});
}

json api_chunk_usage(const ApiRequest& r, const ApiMeta& m, int prompt_tokens, int completion_tokens) {
  json j = head(m, r.route == ApiRoute::kChat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = api_usage(prompt_tokens, completion_tokens);
  return j;
}

std::string api_sse(const json& j) { return "data: " + api_dump(j) + "\n\n"; }

}  // namespace smelt

// OpenAI-compatible request parsing and response building (openai_api.hpp). Field rules follow
// the OpenAI API reference; where it is silent or we differ (top_k, ignore_eos, token-id prompts,
// cut max_tokens) docs/serve.md says so.
#include "smelt/serve/openai_api.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <type_traits>

#include <fmt/format.h>

#include "smelt/serve/text_stream.hpp"

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

// One JSON value as T: int64_t (JSON integers, or numbers with no fraction such as 16.0, within
// int64), double (any number) or bool. A wrong type sets err ("'param' must be ..., got ...").
template <class T>
bool get_as(const json& v, const std::string& param, T& out, ApiError& err) {
  if constexpr (std::is_same_v<T, int64_t>) {
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
  } else {
    constexpr bool kNumber = std::is_same_v<T, double>;
    static_assert(kNumber || std::is_same_v<T, bool>);
    if (kNumber ? !v.is_number() : !v.is_boolean()) {
      err = wrong_type(param, kNumber ? "a number" : "a boolean", v);
      return false;
    }
    out = v.get<T>();
    return true;
  }
}

// The field, or nullptr when absent or null (OpenAI treats null as "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// The field `name`, or nullptr with err "'name' is required (<what>)" when absent or null.
const json* required(const json& body, const char* name, const char* what, ApiError& err) {
  const json* v = field(body, name);
  if (!v) err = bad(name, fmt::format("'{}' is required ({})", name, what), "missing_required_parameter");
  return v;
}

// The values a numeric field accepts, [lo, hi] ((lo, hi] when lo_open), and the end of the error
// message for any other value: "'name' is V: <want>".
template <class T>
struct Range {
  T lo, hi;
  std::string want;
  bool lo_open = false;
};

// The optional field `name` read as T (get_as) into out, converted to out's type; absent or null
// leaves out as it was. The one place a field's type and range are checked.
template <class T, class Out>
bool read_field(const json& body, const char* name, Out& out, ApiError& err, const Range<T>* range = nullptr) {
  const json* v = field(body, name);
  if (!v) return true;
  T got;
  if (!get_as(*v, name, got, err)) return false;
  if (range && !((range->lo_open ? got > range->lo : got >= range->lo) && got <= range->hi)) {
    err = bad(name, fmt::format("'{}' is {}: {}", name, got, range->want));
    return false;
  }
  out = Out(got);
  return true;
}
template <class T, class Out>
bool read_field(const json& body, const char* name, const Range<T>& range, Out& out, ApiError& err) {
  return read_field<T>(body, name, out, err, &range);
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
    if (!get_as(arr[i], p, id, err)) return false;
    if (id < 0 || id >= vocab) {
      err = bad(param, fmt::format("'{}' is {}: token ids lie in [0, {})", p, id, vocab));
      return false;
    }
    out.push_back((int32_t)id);
  }
  return true;
}

// One entry of a `prompt` list: a string or a non-empty array of token ids.
bool parse_list_prompt(const json& v, size_t i, const ApiContext& ctx, ApiPrompt& out, ApiError& err) {
  const std::string p = fmt::format("prompt[{}]", i);
  if (v.is_string()) {
    out.text = v.get<std::string>();
    return true;
  }
  if (!v.is_array()) {
    err = wrong_type(p, "a string or an array of token ids", v);
  } else if (v.empty()) {
    err = bad("prompt", fmt::format("'{}' is an empty array", p));
  } else {
    out.is_ids = true;
    if (parse_ids(v, p, ctx.vocab_size, out.ids, err)) return true;
  }
  err.param = "prompt";
  return false;
}

bool parse_prompt(const json& body, const ApiContext& ctx, ApiRequest& r, ApiError& err) {
  const json* p = required(body, "prompt", "a string, an array of token ids, or an array of either", err);
  if (!p) return false;
  r.prompts.assign(1, ApiPrompt{});
  if (p->is_string()) {
    r.prompts[0].text = p->get<std::string>();
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
  if (!first.is_string() && !first.is_array()) {  // one prompt of token ids
    r.prompts[0].is_ids = true;
    if (parse_ids(*p, "prompt", ctx.vocab_size, r.prompts[0].ids, err)) return true;
    err.param = "prompt";
    return false;
  }
  // a list of prompts: one choice each
  if ((int)p->size() > ctx.max_prompts) {
    err = bad("prompt", fmt::format("'prompt' holds {} prompts; at most {} per request (the server's --slots + "
                                    "--max-queue, at most {}): send fewer per request", p->size(), ctx.max_prompts,
                                    kApiMaxPrompts));
    return false;
  }
  r.prompt_is_list = true;
  r.prompts.assign(p->size(), ApiPrompt{});
  for (size_t i = 0; i < p->size(); i++)
    if (!parse_list_prompt((*p)[i], i, ctx, r.prompts[i], err)) return false;
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
  const json* m = required(body, "messages", "an array of {\"role\", \"content\"}", err);
  if (!m) return false;
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
  SamplingConfig& sc = r.sampling;
  if (!read_field(body, "temperature", Range<double>{0, 2, "want 0..2 (0 is greedy)"}, sc.temperature, err) ||
      !read_field(body, "top_p", Range<double>{0, 1, "want a value in (0, 1]", true}, sc.top_p, err) ||
      !read_field(body, "top_k", Range<int64_t>{0, ctx.vocab_size,
                  fmt::format("want 0 (off) .. {} (the vocabulary)", ctx.vocab_size)}, sc.top_k, err))
    return false;
  std::optional<int64_t> seed;
  if (!read_field<int64_t>(body, "seed", seed, err)) return false;
  r.seed_given = seed.has_value();
  if (seed) {
    sc.seed = (uint64_t)*seed;
  } else {
    // OpenAI: no seed, a fresh draw each request
    std::random_device rd;
    sc.seed = ((uint64_t)rd() << 32) ^ rd();
  }
  // OpenAI's penalties on the completion's tokens so far (serve/sampling.hpp)
  const Range<double> penalty{-2.0, 2.0, "want a value in [-2, 2]"};
  if (!read_field(body, "presence_penalty", penalty, sc.presence_penalty, err) ||
      !read_field(body, "frequency_penalty", penalty, sc.frequency_penalty, err))
    return false;
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

bool parse_model(const json& body, const ApiContext& ctx, ApiRequest& r, ApiError& err) {
  const json* m = field(body, "model");
  if (!m) return true;
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
  return true;
}

bool parse_stream(const json& body, ApiRequest& r, ApiError& err) {
  if (!read_field<bool>(body, "stream", r.stream, err)) return false;
  const json* v = field(body, "stream_options");
  if (!v) return true;
  if (!v->is_object()) {
    err = wrong_type("stream_options", "an object", *v);
    return false;
  }
  if (!r.stream) {
    err = bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    return false;
  }
  if (const json* u = field(*v, "include_usage"); u && !get_as(*u, "stream_options.include_usage", r.include_usage, err)) {
    err.param = "stream_options";
    return false;
  }
  return true;
}

bool parse_common(const json& body, const ApiContext& ctx, ApiRequest& r, ApiError& err) {
  if (!parse_model(body, ctx, r, err)) return false;
  int64_t one;
  if (!read_field(body, "n", Range<int64_t>{1, 1, "only 1 completion per request is supported"}, one, err) ||
      !read_field(body, "best_of", Range<int64_t>{1, 1, "only 1 is supported"}, one, err))
    return false;
  for (const char* name : {"tools", "functions"}) {
    if (const json* v = field(body, name); v && !(v->is_array() && v->empty())) {
      err = bad(name, fmt::format("'{}' is not supported (no tool calling)", name), "unsupported_parameter");
      return false;
    }
  }
  if (!parse_stream(body, r, err) || !parse_sampling(body, ctx, r, err) || !parse_stop(body, r, err) ||
      !read_field<bool>(body, "ignore_eos", r.ignore_eos, err) ||
      !read_field<bool>(body, "return_token_ids", r.return_token_ids, err))
    return false;
  // max_tokens (chat: max_completion_tokens first, as OpenAI; when given, max_tokens is not read).
  // Completions take 0 too, with echo (checked with echo, in parse_completion_fields).
  const bool chat = r.route == ApiRoute::kChat;
  const Range<int64_t> tokens{chat ? 1 : 0, ctx.ctx,
                              fmt::format("want 1..{} (the context, prompt included){}", ctx.ctx,
                                          chat ? "" : ", or 0 with 'echo' to score the prompt only")};
  if (chat && !read_field(body, "max_completion_tokens", tokens, r.max_tokens, err)) return false;
  if (r.max_tokens > 0) {
    r.max_tokens_param = "max_completion_tokens";
    return true;
  }
  std::optional<int64_t> n;
  if (!read_field(body, "max_tokens", tokens, n, err)) return false;
  if (n) {
    r.max_tokens = (int)*n;
    r.score_only = *n == 0;
  }
  return true;
}

// completions: echo, and logprobs as the number of top entries (0..20); then what these allow
// together with max_tokens 0, a prompt list and stream.
bool parse_completion_fields(const json& body, ApiRequest& r, const ApiContext& ctx, ApiError& err) {
  std::optional<int64_t> n;
  if (!read_field<bool>(body, "echo", r.echo, err) ||
      !read_field(body, "logprobs", Range<int64_t>{0, kApiMaxLogprobs, fmt::format("want 0..{}", kApiMaxLogprobs)}, n, err))
    return false;
  if (n) {
    r.logprobs = true;
    r.top_logprobs = (int)*n;
  }
  if (r.score_only && !r.echo) {
    err = bad("max_tokens", fmt::format("'max_tokens' is 0: want 1..{}; 0 only with 'echo': true (the prompt "
                                        "scored, nothing generated)", ctx.ctx));
    return false;
  }
  if (r.stream && r.prompts.size() > 1) {
    err = bad("stream", fmt::format("'stream' with {} prompts is not supported: stream one prompt per request, "
                                    "or send the list without 'stream'", r.prompts.size()), "unsupported_parameter");
    return false;
  }
  if (r.stream && r.echo && r.logprobs) {
    err = bad("stream", "'stream' with 'echo' and 'logprobs' is not supported (the prompt's log probabilities "
              "come in a non-streamed response): leave out 'stream'", "unsupported_parameter");
    return false;
  }
  return true;
}

// chat: logprobs as a boolean, top_logprobs beside it
bool parse_chat_fields(const json& body, ApiRequest& r, ApiError& err) {
  std::optional<int64_t> n;
  if (!read_field<bool>(body, "logprobs", r.logprobs, err) ||
      !read_field(body, "top_logprobs", Range<int64_t>{0, kApiMaxLogprobs, fmt::format("want 0..{}", kApiMaxLogprobs)}, n, err))
    return false;
  if (!n) return true;
  if (!r.logprobs) {
    err = bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    return false;
  }
  r.top_logprobs = (int)*n;
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
  if (!parse_body(body, j, err) || !parse_common(j, ctx, r, err)) return false;
  if (route == ApiRoute::kCompletions) return parse_prompt(j, ctx, r, err) && parse_completion_fields(j, r, ctx, err);
  return parse_messages(j, r, err) && parse_chat_fields(j, r, err);
}

namespace {

// The ids of prompt i (chat: the rendered conversation); an empty prompt starts from the
// end-of-document token. param: how errors name it.
bool prompt_ids(const ApiRequest& r, size_t i, const Tokenizer& tok, const ChatTemplate& tmpl,
                const std::string& param, std::vector<int32_t>& out, ApiError& err) {
  std::vector<uint32_t> ids;
  if (r.route == ApiRoute::kChat) {
    if (Status s = chat_template_encode(tmpl, tok, r.messages, ids); !s) {
      err = bad("messages", s.message());
      return false;
    }
    out.assign(ids.begin(), ids.end());
  } else if (r.prompts[i].is_ids) {
    out = r.prompts[i].ids;
  } else {
    tok.encode(r.prompts[i].text, ids, /*allow_special=*/true);
    out.assign(ids.begin(), ids.end());
  }
  if (!out.empty()) return true;
  const auto eod = tok.eod_id();
  if (!eod) {
    err = bad(r.route == ApiRoute::kChat ? "messages" : "prompt",
              fmt::format("'{}' is empty and the tokenizer has no end-of-document token to start from", param));
    return false;
  }
  out.push_back((int32_t)*eod);
  return true;
}

// The generation of prompt i.
bool build_one(const ApiRequest& r, size_t i, const Tokenizer& tok, const ChatTemplate& tmpl, const ApiContext& ctx,
               GenRequest& gen, ApiError& err) {
  const char* field = r.route == ApiRoute::kChat ? "messages" : "prompt";
  const std::string param = r.prompt_is_list ? fmt::format("prompt[{}]", i) : field;
  gen.prompt.clear();
  if (!prompt_ids(r, i, tok, tmpl, param, gen.prompt, err)) return false;
  const int n = (int)gen.prompt.size();
  if (r.score_only ? n > ctx.ctx : n >= ctx.ctx) {
    err = bad(field, fmt::format("the {} is {} tokens; the context is {} tokens{} (shorten it, or start the server "
                                 "with a larger --ctx)", param, n, ctx.ctx,
                                 r.score_only ? "" : ", which leaves no room to generate"),
              "context_length_exceeded");
    return false;
  }
  int want = r.max_tokens > 0 ? r.max_tokens
                              : (r.route == ApiRoute::kChat ? ctx.ctx - n : kApiDefaultCompletionTokens);
  // the completion ends at the context: "length"
  gen.max_tokens = r.score_only ? 0 : std::min(want, ctx.ctx - n);
  gen.sampling = r.sampling;
  gen.stop = r.stop;
  if (r.route == ApiRoute::kChat)
    for (const auto& s : tmpl.stop) gen.stop.push_back(s);
  // the engine computes log probabilities only when asked for top entries: ask for at least one
  // (the chosen token's own is wanted even with top_logprobs 0); the responses keep top_logprobs
  gen.logprobs = r.logprobs ? std::max(1, r.top_logprobs) : 0;
  gen.prompt_logprobs = r.echo && r.logprobs ? r.top_logprobs : -1;
  gen.ignore_eos = r.ignore_eos;
  return true;
}

}  // namespace

bool api_build_generations(const ApiRequest& r, const Tokenizer& tok, const ChatTemplate& tmpl, const ApiContext& ctx,
                           std::vector<GenRequest>& gens, ApiError& err) {
  const size_t n = r.route == ApiRoute::kChat ? 1 : r.prompts.size();
  gens.assign(n, GenRequest{});
  for (size_t i = 0; i < n; i++)
    if (!build_one(r, i, tok, tmpl, ctx, gens[i], err)) return false;
  return true;
}

bool api_build_generation(const ApiRequest& r, const Tokenizer& tok, const ChatTemplate& tmpl, const ApiContext& ctx,
                          GenRequest& gen, ApiError& err) {
  if (r.route == ApiRoute::kCompletions && r.prompts.empty()) {
    err = bad("prompt", "'prompt' is required (no prompt was parsed)", "missing_required_parameter");
    return false;
  }
  return build_one(r, 0, tok, tmpl, ctx, gen, err);
}

bool api_parse_tokenize(std::string_view body, std::string& content, bool& with_pieces, ApiError& err) {
  json j;
  if (!parse_body(body, j, err)) return false;
  const json* c = required(j, "content", "a string", err);
  if (!c) return false;
  if (!c->is_string()) {
    err = wrong_type("content", "a string", *c);
    return false;
  }
  content = c->get<std::string>();
  with_pieces = false;
  return read_field<bool>(j, "with_pieces", with_pieces, err);
}

bool api_parse_detokenize(std::string_view body, int vocab_size, std::vector<int32_t>& ids, ApiError& err) {
  json j;
  if (!parse_body(body, j, err)) return false;
  const json* t = required(j, "tokens", "an array of token ids", err);
  if (!t) return false;
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

// The prompt's entries of the legacy logprobs arrays (echo with logprobs): each prompt token, its
// log probability given the tokens before it and its top entries (null for the first, and for any
// the engine did not score: a request aborted before it read its prompt), and its offset in the
// prompt's text (the bytes TextStream had made final before it, as generated tokens count them).
json prompt_logprobs(const std::vector<int32_t>& prompt, const std::vector<TokenEvent>& scored, int top,
                     const Tokenizer& tok) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  TextStream text(tok);
  for (size_t i = 0; i < prompt.size(); i++) {
    tokens.push_back(api_token_text(tok, prompt[i]));
    offs.push_back(text.text().size());
    text.push((uint32_t)prompt[i]);
    if (i == 0 || i >= scored.size()) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    lps.push_back(scored[i].logprob);
    json t = json::object();
    for (int k = 0; k < top && k < (int)scored[i].top.size(); k++)
      t[api_token_text(tok, scored[i].top[k].id)] = scored[i].top[k].logprob;
    tops.push_back(t);
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

// b's arrays appended to a's, key by key.
void append_logprobs(json& a, const json& b) {
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const json& v : b[k]) a[k].push_back(v);
}

json chat_choice(const ApiRequest& r, const ApiChoice& c, const Tokenizer& tok) {
  json choice = {{"message", {{"role", "assistant"}, {"content", c.result.text}}}};
  if (r.logprobs) {
    json content = json::array();
    for (const auto& ev : c.events) content.push_back(chat_logprob(ev, r.top_logprobs, tok));
    choice["logprobs"] = {{"content", content}};
  } else {
    choice["logprobs"] = nullptr;
  }
  return choice;
}

json completion_choice(const ApiRequest& r, const ApiChoice& c, const Tokenizer& tok) {
  std::string text = c.result.text;
  size_t offset = 0;
  if (r.echo) {
    std::string p;
    std::vector<uint32_t> ids(c.prompt.begin(), c.prompt.end());
    tok.decode(ids.data(), ids.size(), p);
    offset = p.size();
    text = p + text;
  }
  json choice = {{"text", text}, {"logprobs", nullptr}};
  if (r.logprobs) {
    // The engine's record of every sampled token, the end-of-document token that stopped the
    // request included (its logprob is part of what was scored: lm-evaluation-harness reads echo +
    // max_tokens 1 as the prompt's entries followed by exactly one generated entry).
    const std::vector<TokenEvent>& evs = c.result.tokens.empty() ? c.events : c.result.tokens;
    json lp = completion_logprobs(evs.data(), evs.size(), r.top_logprobs, tok, offset);
    if (r.echo) {
      json all = prompt_logprobs(c.prompt, c.result.prompt_events, r.top_logprobs, tok);
      append_logprobs(all, lp);
      lp = std::move(all);
    }
    choice["logprobs"] = std::move(lp);
  }
  return choice;
}

}  // namespace

json api_response(const ApiRequest& r, const ApiMeta& m, const std::vector<ApiChoice>& choices, const Tokenizer& tok) {
  const bool chat = r.route == ApiRoute::kChat;
  json j = head(m, chat ? "chat.completion" : "text_completion");
  json out = json::array();
  int prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < choices.size(); i++) {
    const ApiChoice& c = choices[i];
    json choice = chat ? chat_choice(r, c, tok) : completion_choice(r, c, tok);
    choice["index"] = i;
    choice["finish_reason"] = api_finish_reason(c.result.finish);
    if (r.return_token_ids) {
      choice["token_ids"] = c.result.ids;
      choice["prompt_token_ids"] = c.prompt;
    }
    out.push_back(std::move(choice));
    prompt_tokens += c.result.prompt_tokens;
    completion_tokens += c.result.completion_tokens;
  }
  if (r.return_token_ids && choices.size() == 1) j["prompt_token_ids"] = choices[0].prompt;
  j["choices"] = std::move(out);
  j["usage"] = api_usage(prompt_tokens, completion_tokens);
  return j;
}

json api_response(const ApiRequest& r, const ApiMeta& m, const GenResult& res, const std::vector<TokenEvent>& events,
                  const std::vector<int32_t>& prompt, const Tokenizer& tok) {
  return api_response(r, m, std::vector<ApiChoice>{ApiChoice{res, events, prompt}}, tok);
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

// The OpenAI-compatible JSON of `smelt serve` (docs/serve.md): request bodies of /v1/completions,
// /v1/chat/completions, /tokenize and /detokenize parsed and checked field by field (every error
// an OpenAI error object naming the field), the generation request they become, and the response
// and streaming-chunk bodies built from the engine's results. Pure functions over JSON text: not
// HTTP (http_server.hpp), not scheduling (engine.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "smelt/serve/chat_template.hpp"
#include "smelt/serve/engine.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

// An OpenAI error: HTTP status plus {"error":{"message","type","param","code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("" -> null)
  std::string code;   // "" -> null
};
nlohmann::json api_error_body(const ApiError& e);
// json::dump that never throws: invalid UTF-8 (a token's partial character) becomes U+FFFD.
std::string api_dump(const nlohmann::json& j);

inline constexpr int kApiMaxStop = 4;
inline constexpr int kApiMaxLogprobs = 20;
inline constexpr int kApiDefaultCompletionTokens = 16;  // OpenAI's default for /v1/completions
// Prompts one /v1/completions request may list, at most (the server lowers it to --slots +
// --max-queue, the most the engine can take at once: a list is admitted whole or not at all).
inline constexpr int kApiMaxPrompts = 256;

// What validation needs to know of the model being served.
struct ApiContext {
  std::string model_name;  // the only name `model` may carry
  int ctx = 0;             // tokens per sequence (prompt + completion)
  int vocab_size = 0;      // V: token ids in prompts must lie in [0, V)
  int max_prompts = kApiMaxPrompts;  // entries of a `prompt` list, at most
};

enum class ApiRoute { kCompletions, kChat };

// One completions prompt: text, or token ids.
struct ApiPrompt {
  std::string text;
  std::vector<int32_t> ids;  // when is_ids
  bool is_ids = false;
};

struct ApiRequest {
  ApiRoute route = ApiRoute::kCompletions;
  std::string model;                  // as given ("" when absent: the served model)
  std::vector<ApiPrompt> prompts;     // completions: one, or a list's (one choice each, in order)
  bool prompt_is_list = false;        // `prompt` was a list of strings / id arrays (errors name prompt[i])
  std::vector<ChatMessage> messages;  // chat
  int max_tokens = 0;                 // 0: not given (completions 16, chat the rest of the context)
  bool score_only = false;            // completions: `max_tokens: 0` with `echo` (score the prompt, generate nothing)
  std::string max_tokens_param = "max_tokens";  // the field it came from (errors name it)
  SamplingConfig sampling;            // OpenAI defaults: temperature 1, top_p 1 (top_k 0: off)
  bool seed_given = false;
  std::vector<std::string> stop;      // up to 4, none empty
  bool stream = false, include_usage = false;
  bool logprobs = false;              // completions: `logprobs` >= 0 given; chat: `logprobs: true`
  int top_logprobs = 0;               // entries per token, 0..20
  bool echo = false;                  // completions: the prompt's text (with logprobs: and its tokens' log
                                      // probabilities) before the completion
  bool return_token_ids = false;      // extension (as vLLM): choices[].token_ids, prompt_token_ids
  bool ignore_eos = false;            // extension (as llama.cpp / vLLM)
};

// Parses and checks a request body. False with err filled (status 400, or 404 for an unknown
// model) on malformed JSON, a wrong type or a value out of range, and on what this server does not
// combine: max_tokens 0 without echo, stream with a prompt list or with echo and logprobs.
bool api_parse_request(ApiRoute route, std::string_view body, const ApiContext& ctx, ApiRequest& out,
                       ApiError& err);

// The prompt's ids (text tokenized with special tokens recognised, ids checked, chat rendered by
// the template; an empty text prompt starts from the end-of-document token), checked against the
// context, and the generation request without callbacks: max_tokens defaults and is cut to what
// the context leaves (the completion then ends with "length"), the template's stop strings added,
// prompt_logprobs set for echo with logprobs. One request per prompt (gens[i] for prompts[i];
// errors name prompt[i] when the prompt was a list); api_build_generation builds the first.
bool api_build_generations(const ApiRequest& r, const Tokenizer& tok, const ChatTemplate& tmpl,
                           const ApiContext& ctx, std::vector<GenRequest>& gens, ApiError& err);
bool api_build_generation(const ApiRequest& r, const Tokenizer& tok, const ChatTemplate& tmpl,
                          const ApiContext& ctx, GenRequest& gen, ApiError& err);

// /tokenize {"content": string, "add_special"?: bool} -> ids; /detokenize {"tokens": [int]} -> text.
bool api_parse_tokenize(std::string_view body, std::string& content, bool& with_pieces, ApiError& err);
bool api_parse_detokenize(std::string_view body, int vocab_size, std::vector<int32_t>& ids, ApiError& err);

// The response-wide fields every body and chunk repeats.
struct ApiMeta {
  std::string id;        // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;   // unix seconds
  std::string model;
};
ApiMeta api_meta_new(ApiRoute route, const std::string& model);

// The finish_reason string: "stop", "length", and for the engine's own endings "cancelled" and
// "aborted" (the server shut down before the completion ended).
const char* api_finish_reason(FinishReason r);

nlohmann::json api_usage(int prompt_tokens, int completion_tokens);

// What one prompt's completion gave: the engine's result (with the prompt's log probabilities
// when echo asked for them), every token it handed out in order, and the prompt's ids.
struct ApiChoice {
  GenResult result;
  std::vector<TokenEvent> events;
  std::vector<int32_t> prompt;
};

// A whole non-streaming body: choices[i] becomes choices[i] with index i, usage their sums. With
// echo the text starts with the prompt's, and with logprobs too its tokens lead the arrays (the
// first with null token_logprobs and top_logprobs). The second form is one choice.
nlohmann::json api_response(const ApiRequest& r, const ApiMeta& m, const std::vector<ApiChoice>& choices,
                            const Tokenizer& tok);
nlohmann::json api_response(const ApiRequest& r, const ApiMeta& m, const GenResult& res,
                            const std::vector<TokenEvent>& events, const std::vector<int32_t>& prompt,
                            const Tokenizer& tok);

// Streaming: one chunk per generated token (text may be ""), a first chunk (chat: the role;
// completions: the echoed prompt, if any), a last with the text held back and finish_reason, and
// with include_usage a usage chunk with no choices. text_offset: characters of text sent before
// (completions' logprobs.text_offset).
nlohmann::json api_chunk_first(const ApiRequest& r, const ApiMeta& m, const std::string& echo_text);
nlohmann::json api_chunk_token(const ApiRequest& r, const ApiMeta& m, const TokenEvent& ev,
                               const Tokenizer& tok, size_t text_offset);
nlohmann::json api_chunk_last(const ApiRequest& r, const ApiMeta& m, const std::string& tail,
                              FinishReason finish);
nlohmann::json api_chunk_usage(const ApiRequest& r, const ApiMeta& m, int prompt_tokens,
                               int completion_tokens);
// "data: {json}\n\n" and the closing "data: [DONE]\n\n".
std::string api_sse(const nlohmann::json& j);
inline constexpr const char* kApiSseDone = "data: [DONE]\n\n";

// The text of one token (its bytes; a partial UTF-8 character stays as bytes, api_dump replaces it).
std::string api_token_text(const Tokenizer& tok, int32_t id);

}  // namespace smelt

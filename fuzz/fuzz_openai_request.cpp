// libFuzzer target: the OpenAI request parser of `smelt serve` (serve/openai_api.hpp) on arbitrary
// bytes, as /v1/completions, /v1/chat/completions, /tokenize and /detokenize bodies; accepted
// bodies go on to the generation request and a response. Not a correctness test: it looks for
// crashes, ASan reports, an accepted request outside the limits, and error bodies that are not
// JSON or do not name a status.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "smelt/serve/openai_api.hpp"

namespace {

const smelt::Tokenizer& tokenizer() {
  static smelt::Tokenizer tok = [] {
    smelt::BpeModel m;
    for (int b = 0; b < 256; b++) m.vocab.push_back(std::string(1, (char)b));
    m.specials.push_back({"<|endoftext|>", 256, true});
    m.vocab.push_back("<|endoftext|>");
    smelt::Tokenizer t;
    if (!smelt::Tokenizer::from_model(m, t)) std::abort();
    return t;
  }();
  return tok;
}

void check_error(const smelt::ApiError& e) {
  if ((e.status != 400 && e.status != 404) || e.message.empty()) std::abort();
  nlohmann::json back = nlohmann::json::parse(smelt::api_dump(smelt::api_error_body(e)));  // throws if not JSON
  if (!back["error"].is_object()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const smelt::ApiContext ctx{"tiny", 64, 257};
  const smelt::Tokenizer& tok = tokenizer();
  const smelt::ChatTemplate tmpl = smelt::chat_template_for(tok);
  for (auto route : {smelt::ApiRoute::kCompletions, smelt::ApiRoute::kChat}) {
    smelt::ApiRequest r;
    smelt::ApiError e;
    if (!smelt::api_parse_request(route, body, ctx, r, e)) {
      check_error(e);
      continue;
    }
    if (r.max_tokens < 0 || r.max_tokens > ctx.ctx || (int)r.stop.size() > smelt::kApiMaxStop ||
        r.top_logprobs < 0 || r.top_logprobs > smelt::kApiMaxLogprobs || !(r.sampling.top_p > 0) ||
        r.sampling.top_p > 1 || r.sampling.temperature < 0 || r.sampling.temperature > 2)
      std::abort();
    smelt::GenRequest g;
    if (!smelt::api_build_generation(r, tok, tmpl, ctx, g, e)) {
      check_error(e);
      continue;
    }
    // A scoring-only request (echo, max_tokens 0) may fill the context and generates nothing.
    if (g.prompt.empty() || (int)g.prompt.size() > ctx.ctx - (r.score_only ? 0 : 1) ||
        g.max_tokens < (r.score_only ? 0 : 1) ||
        (int)g.prompt.size() + g.max_tokens > ctx.ctx)
      std::abort();
    for (int32_t id : g.prompt)
      if (id < 0 || id >= ctx.vocab_size) std::abort();
    smelt::GenResult res;
    res.text = std::string(body.substr(0, 16));  // any bytes: the dump must still be JSON
    res.prompt_tokens = (int)g.prompt.size();
    const smelt::ApiMeta m = smelt::api_meta_new(route, "tiny");
    nlohmann::json back = nlohmann::json::parse(smelt::api_dump(smelt::api_response(r, m, res, {}, g.prompt, tok)));
    if (!back["usage"].is_object()) std::abort();
  }
  std::string content;
  bool pieces = false;
  smelt::ApiError e;
  if (!smelt::api_parse_tokenize(body, content, pieces, e)) check_error(e);
  std::vector<int32_t> ids;
  if (!smelt::api_parse_detokenize(body, 257, ids, e)) {
    check_error(e);
  } else {
    for (int32_t id : ids)
      if (id < 0 || id >= 257) std::abort();
  }
  return 0;
}

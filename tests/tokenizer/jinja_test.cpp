// Tests the chat-template interpreter (jinja.hpp) against @huggingface/jinja 0.5.11 (tests/reference/
// jinja_render.mjs): published chat templates of five model families on several conversations, a table
// of small templates for each expression, filter and test, and refusals that name construct and place.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/tokenizer/jinja.hpp"
#include "test_references.hpp"

namespace {

using Json = nlohmann::ordered_json;
const std::string kSource = SMELT_SOURCE_DIR;

// Transcribed from the published tokenizer_config.json chat_template of Qwen/Qwen2.5-7B-Instruct.
const char* const kQwen25 = R"TPL({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)TPL";

// Transcribed from the published chat_template of Qwen/Qwen3-8B (reasoning_content, <think>, namespace).
const char* const kQwen3 = R"TPL({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})TPL";

// Transcribed from the published chat_template of meta-llama/Llama-3.1-8B-Instruct (date_string, tools,
// system message extraction).
const char* const kLlama31 = R"TPL({{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)TPL";

// Transcribed from the published chat_template of mistralai/Mistral-7B-Instruct-v0.1.
const char* const kMistral = R"TPL({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})TPL";

// Transcribed from the published chat_template of HuggingFaceTB/SmolLM2-135M-Instruct.
const char* const kSmolLM2 = R"TPL({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})TPL";

// Copied from tests/reference/hf_family.py (the templates of the tiny HF model folders).
const char* const kFamilySmollm2Chat = R"TPL({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})TPL";
const char* const kFamilyLlama3Chat = R"TPL({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %})TPL";
const char* const kFamilyMistralChat = R"TPL({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})TPL";
const char* const kFamilyQwen25Chat = R"TPL({%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system
' + messages[0]['content'] + '<|im_end|>
' }}{%- else %}{{- '<|im_start|>system
You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>
' }}{%- endif %}{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}{{- '<|im_start|>' + message.role + '
' + message.content + '<|im_end|>
' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant
' }}{%- endif %})TPL";
const char* const kFamilyQwen3Chat = R"TPL({%- for message in messages %}{{- '<|im_start|>' + message.role + '
' + message.content + '<|im_end|>
' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant
' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>

</think>

' }}{%- endif %}{%- endif %})TPL";

struct Case {
  std::string name, tpl;
  Json ctx;
};
struct Ref {
  bool ok = false;
  std::string out;
};

bool node_ready() {
  return std::system("node --version > /dev/null 2>&1") == 0 &&
         std::filesystem::exists(kSource + "/tests/reference/node_modules/@huggingface/jinja/package.json");
}

// Renders every case with @huggingface/jinja in one node run; empty on failure.
std::vector<Ref> reference(const std::vector<Case>& cases, const std::string& tag) {
  Json in = Json::array();
  for (const auto& c : cases) in.push_back({{"template", c.tpl}, {"context", c.ctx}});
  std::string dir = testing::TempDir();
  std::string inp = dir + "/jinja_" + tag + ".json", out = dir + "/jinja_" + tag + ".out";
  std::ofstream(inp) << in.dump();
  std::string cmd = "cd '" + kSource + "' && node tests/reference/jinja_render.mjs '" + inp + "' > '" + out + "'";
  if (std::system(cmd.c_str()) != 0) return {};
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<Ref> refs;
  for (const auto& r : Json::parse(ss.str())) refs.push_back({r["ok"].get<bool>(), r.value("out", r.value("error", ""))});
  return refs;
}

// Renders each case with Smelt and with the reference; equal strings, or both sides an error.
void compare_all(const std::vector<Case>& cases, const std::string& tag) {
  std::vector<Ref> refs = reference(cases, tag);
  ASSERT_EQ(refs.size(), cases.size()) << "node tests/reference/jinja_render.mjs failed";
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string got;
    smelt::Status st = smelt::jinja_render(cases[i].tpl, cases[i].ctx, got);
    if (!refs[i].ok) {
      EXPECT_FALSE(st.is_ok()) << cases[i].name << ": the reference failed (" << refs[i].out << ") but Smelt rendered\n" << got;
      continue;
    }
    if (!st.is_ok()) { ADD_FAILURE() << cases[i].name << ": " << st.message(); continue; }
    if (got != refs[i].out) {
      size_t p = 0;
      while (p < got.size() && p < refs[i].out.size() && got[p] == refs[i].out[p]) ++p;
      ADD_FAILURE() << cases[i].name << ": differs at byte " << p << "\n smelt: [" << got.substr(p, 60) << "]\n   ref: ["
                    << refs[i].out.substr(p, 60) << "]\nfull smelt:\n" << got << "\nfull ref:\n" << refs[i].out;
    }
  }
}

Json msg(const char* role, const std::string& content) { return {{"role", role}, {"content", content}}; }

Json conversations() {
  Json c = Json::object();
  c["multi_turn"] = {msg("system", "You are terse."), msg("user", "Hi there"), msg("assistant", "Hello! How can I help?"),
                     msg("user", "  What is 2+2?  "), msg("assistant", "4")};
  c["no_system"] = {msg("user", "Hi"), msg("assistant", "Hello."), msg("user", "Bye")};
  c["single_user"] = {msg("user", "Write a haiku.")};
  c["unicode"] = {msg("system", "用中文回答。"), msg("user", "他说：\"你好\"\n路径 C:\\temp\\x 和 'quote'\ttab"),
                  msg("assistant", "好的。\n\n\\n 不是换行")};
  c["assistant_first"] = {msg("assistant", "I speak first."), msg("user", "Ok")};
  Json think = msg("assistant", "<think>\nadd them\n</think>\n\n4");
  c["think"] = {msg("user", "2+2?"), think, msg("user", "and 3+3?"), msg("assistant", "<think>easy</think>6")};
  Json rc = msg("assistant", "5");
  rc["reasoning_content"] = "2+3";
  c["reasoning"] = {msg("user", "2+3?"), rc};
  return c;
}

Json tools_conversation() {
  Json call = {{"role", "assistant"}, {"content", ""},
               {"tool_calls", Json::array({{{"type", "function"},
                                            {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}, {"unit", "c"}}}}}}})}};
  return Json::array({msg("system", "Use tools."), msg("user", "Weather in Paris?"), call, msg("tool", "{\"temp\": 21.5}"),
                      msg("assistant", "It is 21.5 °C.")});
}

Json tools_list() {
  return Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"]}}}])");
}

TEST(Jinja, PublishedTemplatesMatchReference) {
  SMELT_REQUIRE_REFERENCE(node_ready(), "node and tests/reference/node_modules/@huggingface/jinja (cd tests/reference && npm ci)");
  std::vector<std::pair<std::string, std::string>> templates = {
      {"qwen2.5", kQwen25}, {"qwen3", kQwen3}, {"llama3.1", kLlama31}, {"mistral", kMistral}, {"smollm2", kSmolLM2},
      {"family_smollm2", kFamilySmollm2Chat}, {"family_llama3", kFamilyLlama3Chat}, {"family_mistral", kFamilyMistralChat},
      {"family_qwen25", kFamilyQwen25Chat}, {"family_qwen3", kFamilyQwen3Chat}};
  std::vector<Case> cases;
  Json convs = conversations();
  for (const auto& [tname, tpl] : templates) {
    for (auto it = convs.begin(); it != convs.end(); ++it) {
      for (bool gen : {false, true}) {
        Json ctx = {{"messages", *it}, {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"add_generation_prompt", gen}};
        cases.push_back({tname + "/" + it.key() + (gen ? "/gen" : ""), tpl, ctx});
      }
    }
    Json ctx = {{"messages", convs["single_user"]}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
                {"add_generation_prompt", true}, {"enable_thinking", false}, {"date_string", "06 Dec 2026"}};
    cases.push_back({tname + "/no_thinking_dated", tpl, ctx});
  }
  for (const char* tname : {"qwen2.5", "qwen3", "llama3.1"}) {
    std::string tpl = tname == std::string("qwen2.5") ? kQwen25 : tname == std::string("qwen3") ? kQwen3 : kLlama31;
    Json ctx = {{"messages", tools_conversation()}, {"tools", tools_list()}, {"bos_token", "<s>"}, {"add_generation_prompt", true}};
    if (tname == std::string("llama3.1")) ctx["messages"] = Json::array({msg("user", "Weather in Paris?")});
    cases.push_back({std::string(tname) + "/tools", tpl, ctx});
  }
  compare_all(cases, "published");
}

TEST(Jinja, AssistantFirstRaisesInMistral) {
  Json ctx = {{"messages", conversations()["assistant_first"]}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
  std::string out;
  smelt::Status st = smelt::jinja_render(kMistral, ctx, out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("Conversation roles must alternate user/assistant/user/assistant/..."), std::string::npos)
      << st.message();
}

TEST(Jinja, ExpressionsFiltersAndTestsMatchReference) {
  SMELT_REQUIRE_REFERENCE(node_ready(), "node and tests/reference/node_modules/@huggingface/jinja (cd tests/reference && npm ci)");
  Json ctx = Json::parse(R"({"s": "  Hello World  ", "n": 7, "f": 2.5, "g": 3.0, "t": true, "z": null,
    "xs": [3, 1, 2], "d": {"b": 1, "a": "é\"\\\n", "c": [1, 2.0, null, false]},
    "ms": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}, {"role": "user"}],
    "u": "中文 ünï"})");
  std::vector<std::string> table = {
      "{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ -2 }}{{ 1.5 }}{{ 2.0 }}{{ true }}{{ False }}{{ none }}{{ None }}|",
      "{{ [1, 'a', [true, none]] }} {{ {'k': 1, 'j': 'v'} }} {{ d }} {{ xs }}",
      "{{ n + 1 }} {{ n - 10 }} {{ n * 3 }} {{ n / 2 }} {{ n // 2 }} {{ n % 3 }} {{ -7 // 2 }} {{ 7 % -3 * 0 }} {{ f * 2 }} {{ f + n }}",
      "{{ 'a' ~ n ~ f ~ t }} {{ 'x' + 'y' }} {{ xs + [4] }} {{ n ~ '' }}",
      "{{ n == 7 }} {{ n != 7 }} {{ n < 8 }} {{ n > 8 }} {{ n <= 7 }} {{ n >= 8 }} {{ 1 == 1.0 }}",
      "{{ t and n }} {{ z or 'dflt' }} {{ not t }} {{ not z }} {{ xs and 'yes' }} {{ [] or 'empty' }}",
      "{{ 1 in xs }} {{ 5 in xs }} {{ 'ell' in s }} {{ 'a' in d }} {{ 'q' not in d }} {{ 9 not in xs }}",
      "{{ x is defined }} {{ x is undefined }} {{ z is none }} {{ s is string }} {{ n is number }} {{ d is mapping }}",
      "{{ xs is iterable }} {{ xs is sequence }} {{ t is true }} {{ t is false }} {{ t is boolean }} {{ n is integer }}",
      "{{ n is even }} {{ n is odd }} {{ n is not none }} {{ s is not string }} {{ n is integer and s is string }}",
      "[{{ s | trim }}] {{ s | upper }} {{ s | lower }} {{ s | length }} {{ xs | length }} {{ d | length }}",
      "{{ d | tojson }} {{ xs | tojson }} {{ s | tojson }} {{ u | tojson }} {{ f | tojson }} {{ g | tojson }} {{ z | tojson }}",
      "{{ d | tojson(indent=2) }}\n{{ ms | tojson(indent=4) }}\n{{ [] | tojson(indent=2) }}",
      "{{ n | string }} {{ '42' | int + 1 }} {{ f | int }} {{ n | float }} {{ '2.5' | float }}",
      "{{ xs | join(', ') }} {{ xs | join }} {{ xs | first }} {{ xs | last }} {{ xs | list | length }}",
      "{{ x | default('dv') }} {{ n | default(0) }} {{ '' | default('e', true) }}",
      "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}",
      "{{ 'hello world' | capitalize }} {{ 'hello world' | title }} {{ s | replace('l', 'L') }} {{ xs | reverse | list }}",
      "{{ ms | selectattr('role', 'equalto', 'user') | list | length }} {{ ms | rejectattr('role', 'equalto', 'user') | list }}",
      "{{ ms | selectattr('content', 'defined') | map(attribute='content') | join('+') }} {{ ms | map(attribute='role') | list }}",
      "{{ xs | unique | list }} {{ '<a>' | safe }} {{ ms | selectattr('content') | list | length }}",
      "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[::-1] }} {{ xs[:2] }} {{ s[2:7] }} {{ u[::-1] | length }} {{ d['a'] }} {{ d.b }} {{ xs[9] }}|",
      "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'xax'.strip() }}",
      "{{ s.strip().startswith('Hell') }} {{ s.endswith('  ') }} {{ s.upper() }} {{ s.lower() }} {{ s.replace('World', 'there') }} {{ 'ab cd'.title() }}",
      "{{ d.items() | list | length }} {{ d.keys() | list }} {{ d.values() | length }} {{ d.get('b') }} {{ d.get('q', 'none') }} {{ d.get('q') }}|",
      "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
      "{% for x in xs if x > 1 %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}{% for x in [] %}{{ x }}{% else %}empty{% endfor %}",
      "{% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(1, 7, 2) %}{{ i }}{% endfor %} {{ range(4) | list }}",
      "{% set ns = namespace(found=false, count=0) %}{% for m in ms %}{% if m.role == 'tool' %}{% set ns.found = true %}{% endif %}{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.found }} {{ ns.count }}",
      "{% set a = 1 %}{% for x in xs %}{% set a = x %}{% endfor %}{{ a }} {% set b %}in {{ n }}{% endset %}[{{ b }}]",
      "{% if n > 10 %}big{% elif n > 5 %}mid{% else %}small{% endif %} {{ 'y' if t else 'n' }} {{ 'y' if z else 'n' }} [{{ 'only' if z }}]",
      "a  {%- if t %}  b  {%- endif -%}  c {# comment #} d {#- trimmed -#} e\n  {% if t %}\nline\n  {% endif %}\nend",
      "{{- s -}}\n{{ n }}   {{- n }}\n    {%- for x in xs %}\n  {{ x }}\n{%- endfor %}\n",
      "{% for m in ms %}{{ m.role }}:{{ m['content'] }}:{{ m.content is defined }};{% endfor %}{{ ms[0].role | upper }}",
      "{{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }} {{ 'tab\\there' }} {{ 'nl\\nx' | tojson }} {{ '\\\\' }}",
      "{{ u }} {{ u | length }} {{ d.a }}",
  };
  std::vector<Case> cases;
  for (size_t i = 0; i < table.size(); ++i) cases.push_back({"table[" + std::to_string(i) + "] " + table[i], table[i], ctx});
  cases.push_back({"raise", "a{{ raise_exception('boom: bad role') }}", ctx});
  compare_all(cases, "table");
}

TEST(Jinja, RaiseExceptionReturnsItsText) {
  std::string out;
  smelt::Status st = smelt::jinja_render("x{% if true %}{{ raise_exception('Only user and assistant roles!') }}{% endif %}", Json::object(), out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.message(), "Only user and assistant roles!");
  EXPECT_EQ(out, "");
}

TEST(Jinja, RefusalsNameConstructAndPlace) {
  struct Refusal {
    std::string tpl, message;
  };
  std::vector<Refusal> cases = {
      {"{{ messages[0]['content'] | trim }} and {{ messages | foo }}", "chat_template line 1, column 55: the filter 'foo' is not supported"},
      {"ok\n  {% macro hi(x) %}{{ x }}{% endmacro %}", "chat_template line 2, column 6: the statement 'macro' is not supported"},
      {"{% call foo() %}{% endcall %}", "chat_template line 1, column 4: the statement 'call' is not supported"},
      {"{% include 'x' %}", "chat_template line 1, column 4: the statement 'include' is not supported"},
      {"{{ x is divisibleby(3) }}", "chat_template line 1, column 9: the test 'divisibleby' is not supported"},
      {"\n{{ cycler(1) }}", "chat_template line 2, column 4: the function 'cycler' is not supported"},
      {"{{ 'a'.zfill(3) }}", "chat_template line 1, column 13: the method 'zfill' is not supported on this value"},
      {"{{ 2 ** 3 }}", "chat_template line 1, column 6: the operator '**' is not supported"},
  };
  for (const auto& c : cases) {
    std::string out;
    smelt::Status st = smelt::jinja_render(c.tpl, Json::object(), out);
    ASSERT_FALSE(st.is_ok()) << c.tpl;
    EXPECT_EQ(st.message(), c.message) << c.tpl;
  }
}

TEST(Jinja, BadInputIsAnErrorNotACrash) {
  for (const char* tpl : {"{{ x", "{% if x %}a", "{% for %}", "{% endif %}", "{{ 'abc }}", "{# open", "{{ }}",
                          "{{ (1 }}", "{{ [1, 2 }}", "{{ x[] }}", "{% if %}{% endif %}", "{{ 1 / 0 }}", "{{ xs[::0] }}",
                          "{{ 'a' - 1 }}", "{% set %}", "{{ x.y.z }}{{ u | length }}{{ 1 +", "{% for a, b in [1] %}{% endfor %}"}) {
    std::string out;
    smelt::Status st = smelt::jinja_render(tpl, Json{{"xs", {1, 2}}}, out);
    EXPECT_FALSE(st.is_ok()) << tpl;
    EXPECT_FALSE(st.message().empty()) << tpl;
  }
  std::string out;
  ASSERT_TRUE(smelt::jinja_render("[{{ missing }}{{ missing.attr }}{{ missing['k'] }}]{% if missing %}x{% endif %}", Json::object(), out));
  EXPECT_EQ(out, "[]");
}

}  // namespace

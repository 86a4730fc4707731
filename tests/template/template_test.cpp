// Chat templates rendered by Cadre's Jinja subset against transformers' own rendering
// (render_reference.py in the project venv, run once for all cases): the vendored real
// templates over several conversations, special tokens and tools, and snippets pinning down
// Jinja semantics; then hostile, unsupported and mangled templates, which must be refused by
// name, quickly and without crashing.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/process.h"
#include "template/template.h"

namespace {

using nlohmann::ordered_json;
using cadre::tmpl::Template;
using cadre::tmpl::TemplateError;
using cadre::tmpl::TemplateRaised;

constexpr std::time_t kNow = 1735732800;  // 2025-01-01 12:00 UTC: what strftime_now() reads

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string vendored(const std::string& name) { return read_file(CADRE_SOURCE_DIR "/third_party/chat_templates/" + name); }

struct Case {
  std::string label;
  ordered_json spec;  // what render_reference.py reads
};

// Result of one case on one side: the text, or the refusal's message.
struct Outcome {
  bool ok = false;
  std::string text, type;
};

Outcome render_cadre(const ordered_json& spec) {
  Outcome o;
  try {
    const Template t = Template::parse(spec["template"].get<std::string>());
    cadre::tmpl::RenderOptions options;
    options.now = spec["now"].get<std::time_t>();
    o.text = t.render(cadre::tmpl::chat_variables(spec["messages"], spec["add_generation_prompt"].get<bool>(), spec["kwargs"],
                                                  spec["tools"]),
                      options);
    o.ok = true;
  } catch (const TemplateRaised& e) {
    o.text = e.what();
    o.type = "TemplateError";
  } catch (const TemplateError& e) {
    o.text = e.what();
    o.type = "unsupported";
  }
  return o;
}

// Runs transformers once over every case.
std::vector<Outcome> render_transformers(const std::vector<Case>& cases) {
  cadre::test::TempDir dir("chat_template");
  ordered_json all = ordered_json::array();
  for (const auto& c : cases) all.push_back(c.spec);
  cadre::test::write_text(dir / "cases.json", all.dump());
  const auto run = cadre::test::run_process(
      {"sh", "-c", std::string(CADRE_VENV_PYTHON) + " " CADRE_SOURCE_DIR "/tests/template/render_reference.py " + (dir / "cases.json") +
                       " > " + (dir / "out.json")},
      {"PYTHONDONTWRITEBYTECODE=1", "TRANSFORMERS_VERBOSITY=error"}, 300);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const auto results = ordered_json::parse(read_file(dir / "out.json"));
  std::vector<Outcome> out;
  for (const auto& r : results) {
    Outcome o;
    o.ok = r.contains("ok");
    o.text = o.ok ? r["ok"].get<std::string>() : r["error"].get<std::string>();
    o.type = o.ok ? "" : r["type"].get<std::string>();
    out.push_back(o);
  }
  return out;
}

void expect_same(const Case& c, const Outcome& ours, const Outcome& ref) {
  SCOPED_TRACE(c.label);
  ASSERT_EQ(ours.ok, ref.ok) << "cadre: " << ours.text << "\ntransformers: " << ref.text;
  if (ref.ok) {
    EXPECT_EQ(ours.text, ref.text);
  } else if (ref.type == "TemplateError") {
    // The template's own raise_exception(): the same message, word for word.
    EXPECT_EQ(ours.type, "TemplateError") << ours.text;
    EXPECT_EQ(ours.text, ref.text);
  }
}

ordered_json msg(const char* role, const std::string& content) { return {{"role", role}, {"content", content}}; }

// Conversations every template is rendered with (with and without a generation prompt).
std::vector<std::pair<std::string, ordered_json>> conversations() {
  const std::string tricky = "  Spaces around, a {{ brace }} and {% tag %}, quotes ' \" \\ back\\slash,\n\ttabs, "
                             "unicode é 你好 🤗 and a newline at the end\n";
  return {
      {"one user turn", ordered_json::array({msg("user", "Hello, who are you?")})},
      {"system and user", ordered_json::array({msg("system", "You are a pirate."), msg("user", "Hi!")})},
      {"system and three turns",
       ordered_json::array({msg("system", "  Be brief.  "), msg("user", "What is 2+2?"), msg("assistant", " 4 "),
                            msg("user", "And 3+3?")})},
      {"ends with the assistant",
       ordered_json::array({msg("user", "Hi"), msg("assistant", "Hello! How can I help?"), msg("user", "Tell me a joke."),
                            msg("assistant", "Why did the GPU cross the road?")})},
      {"tricky text", ordered_json::array({msg("user", tricky), msg("assistant", tricky), msg("user", tricky)})},
      {"roles not alternating", ordered_json::array({msg("user", "a"), msg("user", "b")})},
      {"empty content", ordered_json::array({msg("user", "")})},
  };
}

ordered_json weather_tool() {
  return ordered_json::parse(R"({"type": "function", "function": {"name": "get_current_temperature",
    "description": "Get the current temperature at a location.",
    "parameters": {"type": "object", "properties": {"location": {"type": "string",
      "description": "The location, as \"City, Country\""}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
      "required": ["location", "unit"]}}})");
}

ordered_json tool_conversation() {
  return ordered_json::parse(R"([
    {"role": "system", "content": "You answer weather questions."},
    {"role": "user", "content": "How warm is Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "abcdef123", "type": "function",
      "function": {"name": "get_current_temperature", "arguments": {"location": "Paris, France", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "abcdef123", "name": "get_current_temperature", "content": "22.0"},
    {"role": "assistant", "content": "It is 22 °C in Paris."},
    {"role": "user", "content": "Thanks!"}])");
}

struct Vendored {
  std::string file;
  ordered_json tokens;  // the special tokens transformers passes (tokenizer.special_tokens_map)
};

std::vector<Vendored> vendored_templates() {
  const ordered_json sp = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}};
  return {{"llama-2-chat.jinja", sp},
          {"llama-3.1-instruct.jinja", {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}}},
          {"llama-3.2-instruct.jinja", {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}}},
          {"mistral-7b-instruct-v0.3.jinja", sp},
          {"mistral-nemo-instruct-2407.jinja", sp},
          {"qwen2.5-instruct.jinja", {{"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}}},
          {"gemma-2-it.jinja", {{"bos_token", "<bos>"}, {"eos_token", "<eos>"}, {"pad_token", "<pad>"}}}};
}

Case make_case(const std::string& label, const std::string& tmpl, const ordered_json& messages, bool agp,
               const ordered_json& kwargs, const ordered_json& tools = nullptr) {
  return {label, {{"template", tmpl}, {"messages", messages}, {"add_generation_prompt", agp}, {"kwargs", kwargs},
                  {"tools", tools}, {"now", kNow}}};
}

std::vector<Case> vendored_cases() {
  std::vector<Case> cases;
  for (const auto& v : vendored_templates()) {
    const std::string text = vendored(v.file);
    for (const auto& [name, conv] : conversations())
      for (bool agp : {false, true})
        cases.push_back(make_case(v.file + " / " + name + (agp ? " / generation prompt" : ""), text, conv, agp, v.tokens));
    ordered_json dated = v.tokens;
    dated["date_string"] = "03 Dec 2026";
    cases.push_back(make_case(v.file + " / date_string", text, conversations()[1].second, true, dated));
    cases.push_back(make_case(v.file + " / tools", text, tool_conversation(), true, v.tokens, ordered_json::array({weather_tool()})));
    cases.push_back(make_case(v.file + " / tool calls without tools", text, tool_conversation(), false, v.tokens));
  }
  return cases;
}

// Small templates pinning down Jinja semantics the real templates lean on.
std::vector<Case> semantics_cases() {
  const std::vector<std::string> snippets = {
      "a  \n  {% if true %}\n  yes\n  {% endif %}\n  b\n",
      "{% for x in [1, 2] %}\n    {{ x }}\n{% endfor %}\n",
      "  {{- ' x ' -}}  \n {#- c -#} \n{%+ if true +%} kept {% endif %}",
      "{# comment #}\n  {# indented comment #}\nline\r\nnext\rlast\n\n",
      "{% set x = 1 %}{% for i in [1,2,3] %}[{{ x }}]{% set x = i * 10 %}({{ x }}){% endfor %}{{ x }}",
      "{% set ns = namespace(a=1, s='') %}{% for i in range(4) %}{% set ns.a = ns.a + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.a }} {{ ns.s }}",
      "{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}, (1, 2), (3,)] }}|{{ 1 / 2 }}|{{ 4 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}",
      "{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ 1e-7 }}|{{ 3.0 }}|{{ 1e16 }}|{{ 123456789012345.6 }}|{{ 0.0001 }}|{{ -0.5 }}|{{ 2 ** -1 }}",
      "{{ x.y }}|{{ x.items() | list }}|{{ x['a'] | length }}|{{ d.get('a') }}|{{ d.get('zz', 5) }}|{{ d.keys() | list }}",
      "{{ 'héllo wörld'[1:4] }}|{{ 'abc'[::-1] }}|{{ 'abc'[5] }}|{{ [1,2,3][-1] }}|{{ [1,2,3,4,5][1:-1:2] }}|{{ 'abc'[-2:] }}|{{ 'héllo' | length }}",
      "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true) }}|{{ x | tojson(separators=(',', ':')) }}|{{ x | tojson(ensure_ascii=true) }}",
      "{{ true == 1 }}{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ none }}{{ True }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 5 }}{{ 'ell' in 'hello' }}{{ 2 not in [1] }}{{ 'k' in {'k': 1} }}",
      "{{ undefined_var ~ 'x' }}|{{ undefined_var | length }}|{{ undefined_var is defined }}|{{ undefined_var | default('dflt') }}|{{ '' | default('e', true) }}",
      "{{ 'a b  c'.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ ' \\u3000x\\t '.strip() }}{{ 'xxhixx'.strip('x') }}{{ 'ab'.startswith(('x', 'a')) }}{{ 'ab'.endswith('b') }}",
      "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{{ {'a': 1} | items | list }}",
      "{% for i in [1, 2, 3] if i > 1 %}{{ loop.index }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}/{{ loop.revindex }} {% else %}none{% endfor %}{% for i in [] %}x{% else %}empty{% endfor %}",
      "{{ 'x' * 3 }}{{ [1] * 2 }}{{ 2 * 'ab' }}{{ 'a' ~ 1 ~ none }}{{ 1 if false }}|{{ 'y' if 0 else 'n' }}|{{ (3 > 2) + 1 }}|{{ 10 // 4.0 }}|{{ -7.5 % 2 }}",
      "{{ ''.join(['a', 'b']) }}{{ ['a', 'b'] | join('-') }}{{ 'hello wORLD' | title }}{{ 'hELLO' | capitalize }}{{ 'AbC' | upper }}{{ 'ÀÉ' | lower }}",
      "{{ 5 | string }}{{ x | string }}{{ 3.7 | int }}{{ '42' | int }}{{ 'x' | int(7) }}{{ '2.5' | float }}{{ -3 | abs }}{{ [3, 1] | first }}{{ [3, 1] | last }}{{ [1, 2] | reverse | list }}",
      "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|{{ msgs | rejectattr('role', 'eq', 'user') | list | length }}|{{ [0, 1, 2] | select | list }}|{{ [1, 2, 3] | reject('odd') | list }}",
      "{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ x is mapping }}{{ 'a' is iterable }}{{ x is sequence }}{{ none is none }}{{ 4 is divisibleby 2 }}{{ 3 is odd }}{{ 'abc' is lower }}{{ undefined_var is iterable }}",
      "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C') }}",
      "{% set block %}\n  inner {{ 1 + 1 }}\n{% endset %}[{{ block }}]{% with a = 5 %}{{ a }}{% endwith %}{{ a is defined }}",
      "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}|{{ range(5, 0, -2) | list }}",
      "{{ 'it''s' }}|{{ \"tab\\there\\nnew\\u00e9\\x41\\101\" }}|{{ 'a\\qb' }}|{{ -2 ** 2 }}|{{ not 1 == 2 }}|{{ (1 + 2 * 3) ~ 4 }}|{{ 'ab' | replace('a', 'x') }}|{{ '<&>' | e }}",
      "{{ 1 + 2 * 3 ~ 4 }}",  // `~` binds tighter than `+`: 1 + '64' is an error in both
      "{{ x.y.z }}",
      "{{ undefined_var + 'x' }}",
      "{{ 'a' + 1 }}",
      "{{ raise_exception('Custom refusal: ' ~ 42) }}",
      "{% set x = strftime_now('%Y-%m-%d %d %b %Y %A') %}{{ x }}",
      "{{ messages | length }}{{ add_generation_prompt }}{{ tools }}{{ documents }}",
      "{{ x.__class__ }}|{{ ''.__class__ }}|{{ namespace.__init__ }}",
      // Whitespace control at the edges.
      "{%- if true -%}\n  x  \n{%- endif -%}\n after",
      "\t\t{% if true %}y{% endif %}\nnext\n  {%- if true %} z{% endif %}",
      "text {% if true %}\n  y{% endif %} and {{ 'a' }}\n{{ 'b' }}\n",
      "  {# indented comment #}\n{#- stripped -#}   \n  {%+ if true %}keep{% endif %}",
      "\u3000{% if true %}x{% endif %}\r\n\r\n{% if true %}\r\ny\r\n{% endif %}\n\n",
      "a {{- ' b ' -}} \n c {{ ' d ' }}  {#- e #}  f",
      // Loops, unpacking and small builtins.
      "{% for x in 'abc' %}{{ loop.previtem }}{{ x }}{{ loop.nextitem }}{{ loop.cycle('+', '-') }}{{ loop.revindex0 }} {% endfor %}",
      "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% set p, q = 1, 2 %}{{ p }}{{ q }}{% set t = 1, 2 %}{{ t }}",
      "{{ x | default(none) is none }}{{ [1, 2, 3] | length > 2 }}{{ not y is defined }}{{ 'abc' is string and 1 }}{{ range(3) | map('string') | join }}{{ ('a', 'b') | join(', ') }}",
      "{{ {'b': 1, 'a': 2} | items | map('first') | list }}{{ '%' }}{{ 10 / 3 }}{{ 1_000 }}{{ none | string }}{{ true | string }}[{{ [] | first }}]{{ 'a' < 'B' }}{{ x.a[1:] }}",
      "{{ x | tojson(indent='\t') }}{{ [1e100, -5, 1.5e-10, 'emoji 🤗'] | tojson(ensure_ascii=true) }}{{ [[], {}, [[]]] | tojson(indent=0) }}",
      "{{ '  multi\n line  ' | trim }}|{{ 'x' | trim('x') }}|{{ 'a-b-c'.rsplit('-', 1) }}|{{ ' a  b '.split(' ') }}|{{ 'abc'.find('c') }}|{{ 'aaa'.count('a') }}|{{ 'aXbX'.replace('X', '') }}",
      "{{ 'a\n\nb\n' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent('> ', blank=true) }}|{{ 'x\r\ny' | indent }}",
      "{% generation %}g{{ 1 }}{% endgeneration %}|{%- generation -%} h {%- endgeneration %}",
      "{% if messages %}non-empty{% elif tools is none %}no tools{% else %}else{% endif %}|{{ tools is defined }}|{{ documents is none }}",
  };
  const ordered_json kwargs = {{"x", {{"a", ordered_json::array({1, 2.5, nullptr, true, "é\n\"\u2028\x7f\\"})}, {"b", ordered_json::object()}, {"c", {{"z", 1}, {"a", 2}}}}},
                               {"d", {{"a", 1}, {"b", 2}}},
                               {"msgs", ordered_json::array({msg("user", "u1"), msg("assistant", "a1"), msg("user", "u2")})}};
  std::vector<Case> cases;
  for (size_t i = 0; i < snippets.size(); ++i)
    cases.push_back(make_case("snippet " + std::to_string(i) + ": " + snippets[i], snippets[i], ordered_json::array(), true, kwargs));
  // Messages as apply_chat_template prepares them: null keys dropped, reasoning aliased.
  const auto prepared = ordered_json::parse(R"([{"role": "user", "content": "q", "name": null},
    {"role": "assistant", "content": "a", "reasoning": "because", "tool_calls": null},
    {"role": "assistant", "thinking": "t", "content": "b", "reasoning_content": "rc"}])");
  cases.push_back(make_case("prepared messages", "{% for m in messages %}{{ m | items | list }}\n{% endfor %}", prepared, false, kwargs));
  return cases;
}

class ChatTemplateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    vendored_ = vendored_cases();
    semantics_ = semantics_cases();
    std::vector<Case> all = vendored_;
    all.insert(all.end(), semantics_.begin(), semantics_.end());
    auto results = render_transformers(all);
    ASSERT_EQ(results.size(), all.size());
    reference_vendored_.assign(results.begin(), results.begin() + static_cast<long>(vendored_.size()));
    reference_semantics_.assign(results.begin() + static_cast<long>(vendored_.size()), results.end());
  }
  static std::vector<Case> vendored_, semantics_;
  static std::vector<Outcome> reference_vendored_, reference_semantics_;
};

std::vector<Case> ChatTemplateTest::vendored_, ChatTemplateTest::semantics_;
std::vector<Outcome> ChatTemplateTest::reference_vendored_, ChatTemplateTest::reference_semantics_;

TEST_F(ChatTemplateTest, VendoredTemplatesRenderAsTransformersDoes) {
  ASSERT_EQ(reference_vendored_.size(), vendored_.size());
  int rendered = 0, refused = 0;
  for (size_t i = 0; i < vendored_.size(); ++i) {
    expect_same(vendored_[i], render_cadre(vendored_[i].spec), reference_vendored_[i]);
    (reference_vendored_[i].ok ? rendered : refused)++;
  }
  // Most cases render; the rest are the templates' own refusals (roles, system, tool ids).
  EXPECT_GT(rendered, 60);
  EXPECT_GT(refused, 5);
  // An anchor that does not depend on the reference at all: Llama 2's well-known format.
  for (size_t i = 0; i < vendored_.size(); ++i)
    if (vendored_[i].label == "llama-2-chat.jinja / system and user / generation prompt") {
      EXPECT_EQ(render_cadre(vendored_[i].spec).text, "<s>[INST] <<SYS>>\nYou are a pirate.\n<</SYS>>\n\nHi! [/INST]");
    }
}

TEST_F(ChatTemplateTest, JinjaSemanticsMatchTransformers) {
  ASSERT_EQ(reference_semantics_.size(), semantics_.size());
  int rendered = 0;
  for (size_t i = 0; i < semantics_.size(); ++i) {
    expect_same(semantics_[i], render_cadre(semantics_[i].spec), reference_semantics_[i]);
    rendered += reference_semantics_[i].ok;
  }
  EXPECT_EQ(rendered, static_cast<int>(semantics_.size()) - 5);  // five snippets are errors on purpose
}

TEST_F(ChatTemplateTest, GemmaRefusesTheSystemRoleWithTheTemplatesOwnMessage) {
  const Template gemma = Template::parse(vendored("gemma-2-it.jinja"));
  const auto vars = cadre::tmpl::chat_variables(ordered_json::array({msg("system", "Be nice."), msg("user", "Hi")}), true,
                                                {{"bos_token", "<bos>"}});
  try {
    gemma.render(vars);
    FAIL() << "the system role rendered";
  } catch (const TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "System role not supported");
  }
  for (size_t i = 0; i < vendored_.size(); ++i)
    if (vendored_[i].label == "gemma-2-it.jinja / system and user") {
      EXPECT_FALSE(reference_vendored_[i].ok);
      EXPECT_EQ(reference_vendored_[i].text, "System role not supported");
    }
}

// A hostile template must end with a clear error, fast, and without exhausting memory or stack.
void expect_refused(const std::string& source, const std::string& needle) {
  SCOPED_TRACE(source.substr(0, 120));
  const auto start = std::chrono::steady_clock::now();
  try {
    const Template t = Template::parse(source);
    t.render(cadre::tmpl::chat_variables(ordered_json::array({msg("user", "hi")}), true));
    ADD_FAILURE() << "rendered";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

TEST(ChatTemplateLimits, HostileTemplatesAreRefusedQuickly) {
  expect_refused("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "loop iterations");
  expect_refused("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(1) }}", "macro calls nest deeper than");
  expect_refused("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", "rendered output exceeds");
  expect_refused("{{ 'x' * 1000000000000 }}", "exceeds the limit");
  expect_refused("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "exceeds the limit");
  expect_refused("{{ range(1000000) | length }}", "range too big");
  expect_refused("{% set big = 'x' * 10000000 %}{% for i in range(100000) %}{% if big | length > 0 and 'y' in big %}{% endif %}{% endfor %}",
                 "scanned more than");
  expect_refused("{{ 2 ** 100 }}", "integer overflow");
  expect_refused("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "nests deeper");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  expect_refused(ifs, "nests deeper");
  expect_refused(std::string(2 << 20, 'x'), "exceeds the limit");
  std::string chain = "{{ 1";
  for (int i = 0; i < 200000; ++i) chain += " + 1";
  expect_refused(chain + " }}", "nests deeper");
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) filters += "|trim";
  expect_refused(filters + " }}", "nests deeper");
  // Recursion through a macro whose body is itself deeply nested: bounded by the evaluator's depth.
  std::string deep = "{% macro f(n) %}";
  for (int i = 0; i < 30; ++i) deep += "{% if true %}";
  deep += "{{ f(n + 1) }}";
  for (int i = 0; i < 30; ++i) deep += "{% endif %}";
  expect_refused(deep + "{% endmacro %}{{ f(0) }}", "nests deeper than");
  expect_refused("{% set ns = namespace() %}{% set ns._secret = 1 %}", "underscore-prefixed");
  expect_refused("{{ messages.__class__.__mro__ }}", "not allowed");
}

TEST(ChatTemplateLimits, UnsupportedConstructsAreNamedWithTheirLine) {
  expect_refused("line 1\n{% include 'other.jinja' %}", "line 2: unsupported tag 'include'");
  expect_refused("\n\n{{ messages | wordcount }}", "line 3: no filter named 'wordcount'");
  expect_refused("{{ 1 is escaped }}", "no test named 'escaped'");
  expect_refused("{% for m in messages recursive %}{% endfor %}", "recursive for loops are not supported");
  expect_refused("{{ '{}'.format(1) }}", "str method 'format' is not supported");
  expect_refused("{% do messages.append(1) %}", "tag 'do'");
  expect_refused("{% raw %}x{% endraw %}", "unsupported tag 'raw'");
  expect_refused("{% call foo() %}{% endcall %}", "unsupported tag 'call'");
  expect_refused("{{ '%s' % 1 }}", "string formatting with '%' is not supported");
  expect_refused("{% if true %}", "missing 'endif'");
  expect_refused("{{ f(*args) }}", "*args and **kwargs");
}

// Mangled real templates (bytes deleted, duplicated or replaced, deterministically) must parse
// and render or be refused with a TemplateError: never crash, hang or throw anything else.
TEST(ChatTemplateLimits, MangledTemplatesFailCleanly) {
  const auto vars = cadre::tmpl::chat_variables(
      ordered_json::array({msg("system", "s"), msg("user", "u"), msg("assistant", "a"), msg("user", "u2")}), true,
      {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  uint64_t state = 12345;
  auto rnd = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  const char* pieces[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"", "|", ".", " if ", " for ",
                          " endfor ", " endif ", "loop", "ns", "*", "~", ":", ",", "\n"};
  int rendered = 0, refused = 0;
  for (const auto& v : vendored_templates()) {
    const std::string original = vendored(v.file);
    for (int round = 0; round < 300; ++round) {
      std::string t = original;
      for (int edits = 1 + static_cast<int>(rnd(4)); edits > 0; --edits) {
        const size_t at = rnd(t.size() + 1);
        switch (rnd(3)) {
          case 0: t.erase(at, rnd(12)); break;
          case 1: t.insert(at, pieces[rnd(sizeof pieces / sizeof *pieces)]); break;
          default: t.insert(at, t.substr(rnd(t.size()), rnd(40))); break;
        }
      }
      try {
        cadre::tmpl::RenderOptions options;
        options.now = kNow;
        Template::parse(t).render(vars, options);
        ++rendered;
      } catch (const TemplateError&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(refused, 0);
}

// A long conversation renders in well under a second (the interpreter is not the bottleneck).
TEST(ChatTemplateLimits, LongConversationsRenderQuickly) {
  ordered_json messages = ordered_json::array({msg("system", "You are helpful.")});
  for (int i = 0; i < 2000; ++i) {
    messages.push_back(msg("user", "Question number " + std::to_string(i) + std::string(200, 'q')));
    messages.push_back(msg("assistant", "Answer number " + std::to_string(i) + std::string(200, 'a')));
  }
  messages.push_back(msg("user", "Last question"));
  const Template t = Template::parse(vendored("llama-3.1-instruct.jinja"));
  const auto start = std::chrono::steady_clock::now();
  const std::string out = t.render(cadre::tmpl::chat_variables(messages, true, {{"bos_token", "<|begin_of_text|>"}}));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  EXPECT_GT(out.size(), 800000u);
}

TEST(ChatTemplateLimits, LimitsAreTheCallersToSet) {
  cadre::tmpl::RenderOptions options;
  options.limits.max_output_bytes = 100;
  const Template t = Template::parse("{% for i in range(50) %}{{ i }},{% endfor %}");
  EXPECT_THROW(t.render({}, options), TemplateError);
  options.limits.max_output_bytes = 1000;
  EXPECT_EQ(t.render({}, options).substr(0, 6), "0,1,2,");
}

}  // namespace

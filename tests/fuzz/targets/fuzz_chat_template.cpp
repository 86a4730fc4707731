// Chat templates as a model folder from anywhere carries them (tokenizer_config.json's
// chat_template, chat_template.jinja): any text, parsed and rendered with a fixed conversation
// under small limits, so that each input runs in milliseconds. TemplateError (and its
// TemplateRaised) is the expected answer to a bad or hostile template; output beyond the limit
// is a finding.
#include "fuzz_target.h"
#include "template/template.h"

namespace {

cadre::tmpl::Limits small_limits() {
  cadre::tmpl::Limits limits;
  limits.max_template_bytes = 64 << 10;
  limits.max_iterations = 2000;
  limits.max_output_bytes = 16 << 10;
  limits.max_work_bytes = 1 << 20;
  return limits;
}

const cadre::tmpl::Dict& conversation() {
  static const cadre::tmpl::Dict variables = cadre::tmpl::chat_variables(
      nlohmann::ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Hi <b>there</b> \u00e9\ud83d\ude00"},
                                        {"role": "assistant", "content": "Hello!", "reasoning": "greet"},
                                        {"role": "user", "content": "Count to 3."}])"),
      true, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  return variables;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source = cadre::fuzz::text(data, size);
  cadre::tmpl::RenderOptions options;
  options.limits = small_limits();
  options.now = 1700000000;  // 2023-11-14: strftime_now() reads no clock
  try {
    const cadre::tmpl::Template t = cadre::tmpl::Template::parse(source, options.limits);
    const std::string out = t.render(conversation(), options);
    if (out.size() > options.limits.max_output_bytes) cadre::fuzz::violated("output beyond the limit");
  } catch (const cadre::tmpl::TemplateError&) {
    // the interpreter's own error (TemplateRaised included): the expected answer to bad input
  }
  return 0;
}

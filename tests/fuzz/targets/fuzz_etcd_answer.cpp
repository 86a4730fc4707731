// etcd gateway answers as the rendezvous client decodes them: any JSON where a range, a
// transaction, a lease or an error answer is expected, base64 fields, and watch stream lines.
#include <nlohmann/json.hpp>
#include <sstream>

#include "fuzz_target.h"
#include "rdzv/etcd_answer.h"

using namespace cadre::rdzv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = cadre::fuzz::text(data, size);
  const nlohmann::json answer = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  using cadre::fuzz::only_cadre_errors;
  int64_t revision = 0;
  only_cadre_errors([&] { etcd_range_first(answer, &revision); });
  only_cadre_errors([&] { etcd_txn_succeeded(answer); });
  only_cadre_errors([&] { etcd_txn_range(answer, 0); });
  only_cadre_errors([&] { etcd_txn_range(answer, 1); });
  only_cadre_errors([&] { etcd_header_revision(answer); });
  only_cadre_errors([&] { etcd_keepalive_ttl(answer); });
  only_cadre_errors([&] { etcd_int_field(answer, "ID"); });
  only_cadre_errors([&] { etcd_error_of(answer, text.substr(0, 100)); });
  only_cadre_errors([&] { etcd_kv_from_json(answer); });
  only_cadre_errors([&] {
    if (base64_encode(base64_decode(text)) != text) cadre::fuzz::violated("base64 does not round-trip");
  });
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) etcd_watch_line(line);
  return 0;
}

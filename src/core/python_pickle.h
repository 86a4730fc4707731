// A Python pickle (protocol 2) writer for the plain objects other tools' metadata files are
// made of: None, bools, ints, strings, tuples, lists, dicts, module globals, and instances
// rebuilt the way Python pickles them (NEWOBJ of a class, then BUILD with its state; REDUCE of
// a callable). No memo: every object is written where it occurs. Used for the `.metadata` of
// PyTorch's distributed checkpoint format (ckpt/dcp_export.cpp) and PyTorch's flight-recorder
// dump format (obs/flight_recorder_torch.cpp). In core, which has no libtorch, so both use it.
#pragma once

#include <cstdint>
#include <string>

namespace cadre {

class PickleWriter {
 public:
  PickleWriter();  // protocol 2 header

  PickleWriter& none();
  PickleWriter& boolean(bool v);
  PickleWriter& integer(int64_t v);
  PickleWriter& string(const std::string& utf8);
  PickleWriter& global(const std::string& module, const std::string& name);  // module.name

  // Containers: mark() before the items, then the closing call.
  PickleWriter& mark();
  PickleWriter& tuple();  // the items since mark()
  PickleWriter& list();   // "
  PickleWriter& dict();   // key, value, key, value, ... since mark()

  // global(module, cls) then new_object(): cls.__new__(cls); then the state, then build():
  // __setstate__(state), or the instance's __dict__ updated from a state dict.
  PickleWriter& new_object();
  PickleWriter& build();
  // A callable, then its argument tuple, then reduce(): callable(*args).
  PickleWriter& reduce();

  // The pickle, ended with STOP.
  std::string finish();

 private:
  std::string out_;
};

}  // namespace cadre

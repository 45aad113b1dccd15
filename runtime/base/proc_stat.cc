#include "runtime/base/proc_stat.h"

#include <sstream>
#include <string>

#include "runtime/base/text_file.h"

namespace hutch {

// proc(5) /proc/<pid>/stat: "pid (comm) state ..." where comm may hold spaces and parentheses,
// so fields are counted after the last ')'.
Result<ProcState> read_proc_state(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  auto read = HUTCH_TRY(read_text_file(path));
  const std::string& text = read;
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return plain_error("parse", path);
  std::istringstream fields(text.substr(paren + 1));
  ProcState state;
  fields >> state.state >> state.parent;
  std::string skip;
  for (int field = 5; field < 22; ++field) fields >> skip;
  if (!(fields >> state.start_time)) return plain_error("parse", path + ": no starttime");
  return state;
}

}  // namespace hutch

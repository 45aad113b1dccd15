#include "runtime/base/child_error.h"

namespace hutch {

void append_cstr(char* a, unsigned long size, const char* b) {
  unsigned long i = 0;
  while (i + 1 < size && a[i] != '\0') ++i;
  while (i + 1 < size && *b != '\0') a[i++] = *b++;
  if (size > 0) a[i] = '\0';
}

void set_child_error(ChildError* out, const char* step, const char* detail, int err) {
  out->step[0] = '\0';
  out->detail[0] = '\0';
  append_cstr(out->step, sizeof out->step, step);
  append_cstr(out->detail, sizeof out->detail, detail);
  out->err = err;
}

bool child_failure(ChildError* error, const char* step, const char* detail, int err) {
  set_child_error(error, step, detail, err);
  return false;
}

}  // namespace hutch

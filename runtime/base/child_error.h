// A fixed-size failure record: what the child reports between clone and execve, where it must
// not allocate. The parent turns it into an Error.
#pragma once

namespace hutch {

struct ChildError {
  char step[48];
  char detail[208];
  int err;
};

// Fills `out` (truncating). Async-signal-safe.
void set_child_error(ChildError* out, const char* step, const char* detail, int err);

// set_child_error, then false: a child step's `return child_failure(error, "mount", path, errno);`.
bool child_failure(ChildError* error, const char* step, const char* detail, int err);

// Appends b to a (a holds size bytes), truncating. Async-signal-safe.
void append_cstr(char* a, unsigned long size, const char* b);

}  // namespace hutch

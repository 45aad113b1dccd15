file(REMOVE_RECURSE
  "libhutch_seccomp_default.a"
)

file(REMOVE_RECURSE
  "libhutch_runtime.a"
)

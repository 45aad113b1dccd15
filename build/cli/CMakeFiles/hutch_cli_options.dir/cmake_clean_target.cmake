file(REMOVE_RECURSE
  "libhutch_cli_options.a"
)

file(REMOVE_RECURSE
  "libhutch_seccomp_profile.a"
)

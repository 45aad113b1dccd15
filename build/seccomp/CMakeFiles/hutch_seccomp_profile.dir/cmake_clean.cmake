file(REMOVE_RECURSE
  "CMakeFiles/hutch_seccomp_profile.dir/profile.cc.o"
  "CMakeFiles/hutch_seccomp_profile.dir/profile.cc.o.d"
  "libhutch_seccomp_profile.a"
  "libhutch_seccomp_profile.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/hutch_seccomp_profile.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

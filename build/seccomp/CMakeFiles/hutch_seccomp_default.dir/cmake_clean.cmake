file(REMOVE_RECURSE
  "CMakeFiles/hutch_seccomp_default.dir/kDefaultSeccompProfile.cc.o"
  "CMakeFiles/hutch_seccomp_default.dir/kDefaultSeccompProfile.cc.o.d"
  "libhutch_seccomp_default.a"
  "libhutch_seccomp_default.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/hutch_seccomp_default.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

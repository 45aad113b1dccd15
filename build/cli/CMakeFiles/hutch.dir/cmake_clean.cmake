file(REMOVE_RECURSE
  "../hutch"
  "../hutch.pdb"
  "CMakeFiles/hutch.dir/main.cc.o"
  "CMakeFiles/hutch.dir/main.cc.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/hutch.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

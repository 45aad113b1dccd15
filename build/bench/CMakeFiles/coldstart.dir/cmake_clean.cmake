file(REMOVE_RECURSE
  "CMakeFiles/coldstart.dir/coldstart.cc.o"
  "CMakeFiles/coldstart.dir/coldstart.cc.o.d"
  "coldstart"
  "coldstart.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/coldstart.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

file(REMOVE_RECURSE
  "CMakeFiles/hutch_cli_options.dir/options.cc.o"
  "CMakeFiles/hutch_cli_options.dir/options.cc.o.d"
  "libhutch_cli_options.a"
  "libhutch_cli_options.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/hutch_cli_options.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

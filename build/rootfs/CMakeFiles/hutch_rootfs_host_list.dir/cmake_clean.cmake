file(REMOVE_RECURSE
  "CMakeFiles/hutch_rootfs_host_list.dir/kHostRootfsList.cc.o"
  "CMakeFiles/hutch_rootfs_host_list.dir/kHostRootfsList.cc.o.d"
  "libhutch_rootfs_host_list.a"
  "libhutch_rootfs_host_list.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/hutch_rootfs_host_list.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

rootfs/CMakeFiles/hutch_rootfs_host_list.dir/kHostRootfsList.cc.o: \
 /work/main/build/rootfs/kHostRootfsList.cc /usr/include/stdc-predef.h

file(REMOVE_RECURSE
  "libhutch_rootfs_host_list.a"
)

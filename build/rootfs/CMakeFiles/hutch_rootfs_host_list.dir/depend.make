# Empty dependencies file for hutch_rootfs_host_list.
# This may be replaced when dependencies are built.

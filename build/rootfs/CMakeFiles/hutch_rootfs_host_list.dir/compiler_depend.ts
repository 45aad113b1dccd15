# CMAKE generated file: DO NOT EDIT!
# Timestamp file for compiler generated dependencies management for hutch_rootfs_host_list.

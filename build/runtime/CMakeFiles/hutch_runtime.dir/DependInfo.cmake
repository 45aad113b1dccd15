
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/runtime/cgroup/layout.cc" "runtime/CMakeFiles/hutch_runtime.dir/cgroup/layout.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/cgroup/layout.cc.o.d"
  "/work/main/runtime/error.cc" "runtime/CMakeFiles/hutch_runtime.dir/error.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/error.cc.o.d"
  "/work/main/runtime/features.cc" "runtime/CMakeFiles/hutch_runtime.dir/features.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/features.cc.o.d"
  "/work/main/runtime/fs/host_rootfs.cc" "runtime/CMakeFiles/hutch_runtime.dir/fs/host_rootfs.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/fs/host_rootfs.cc.o.d"
  "/work/main/runtime/fs/idmap.cc" "runtime/CMakeFiles/hutch_runtime.dir/fs/idmap.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/fs/idmap.cc.o.d"
  "/work/main/runtime/fs/mount_exec.cc" "runtime/CMakeFiles/hutch_runtime.dir/fs/mount_exec.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/fs/mount_exec.cc.o.d"
  "/work/main/runtime/fs/mount_plan.cc" "runtime/CMakeFiles/hutch_runtime.dir/fs/mount_plan.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/fs/mount_plan.cc.o.d"
  "/work/main/runtime/fs/paths.cc" "runtime/CMakeFiles/hutch_runtime.dir/fs/paths.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/fs/paths.cc.o.d"
  "/work/main/runtime/ns/net.cc" "runtime/CMakeFiles/hutch_runtime.dir/ns/net.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/ns/net.cc.o.d"
  "/work/main/runtime/ns/userns.cc" "runtime/CMakeFiles/hutch_runtime.dir/ns/userns.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/ns/userns.cc.o.d"
  "/work/main/runtime/process/child.cc" "runtime/CMakeFiles/hutch_runtime.dir/process/child.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/process/child.cc.o.d"
  "/work/main/runtime/process/child_error.cc" "runtime/CMakeFiles/hutch_runtime.dir/process/child_error.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/process/child_error.cc.o.d"
  "/work/main/runtime/process/init.cc" "runtime/CMakeFiles/hutch_runtime.dir/process/init.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/process/init.cc.o.d"
  "/work/main/runtime/process/sync.cc" "runtime/CMakeFiles/hutch_runtime.dir/process/sync.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/process/sync.cc.o.d"
  "/work/main/runtime/sandbox.cc" "runtime/CMakeFiles/hutch_runtime.dir/sandbox.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/sandbox.cc.o.d"
  "/work/main/runtime/security/caps.cc" "runtime/CMakeFiles/hutch_runtime.dir/security/caps.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/security/caps.cc.o.d"
  "/work/main/runtime/security/seccomp.cc" "runtime/CMakeFiles/hutch_runtime.dir/security/seccomp.cc.o" "gcc" "runtime/CMakeFiles/hutch_runtime.dir/security/seccomp.cc.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build/rootfs/CMakeFiles/hutch_rootfs_host_list.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")


# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/cli/options.cc" "cli/CMakeFiles/hutch_cli_options.dir/options.cc.o" "gcc" "cli/CMakeFiles/hutch_cli_options.dir/options.cc.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build/runtime/CMakeFiles/hutch_runtime.dir/DependInfo.cmake"
  "/work/main/build/rootfs/CMakeFiles/hutch_rootfs_host_list.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")

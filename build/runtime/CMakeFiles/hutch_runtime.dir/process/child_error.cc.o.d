runtime/CMakeFiles/hutch_runtime.dir/process/child_error.cc.o: \
 /work/main/runtime/process/child_error.cc /usr/include/stdc-predef.h \
 /work/main/runtime/process/child_error.h

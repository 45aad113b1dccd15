seccomp/CMakeFiles/hutch_seccomp_default.dir/kDefaultSeccompProfile.cc.o: \
 /work/main/build/seccomp/kDefaultSeccompProfile.cc \
 /usr/include/stdc-predef.h

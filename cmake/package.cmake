# cpack -G DEB: a .deb of what cmake/install.cmake installs, under /usr, for an edge box.
# Depends: the shared libraries' packages (dpkg-shlibdeps, from dpkg-dev) and the tools hutch
# runs: mkfs.erofs (erofs-utils) makes each layer's image (runtime/fs/erofs.cc), mkfs.ext4
# (e2fsprogs) each persistent volume's (runtime/volumes/volume_store.cc).
set(CPACK_PACKAGE_NAME hutch)
set(CPACK_PACKAGE_VERSION 0.1.0)
set(CPACK_PACKAGE_CONTACT "hutch maintainers <hutch@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "lightweight Linux sandboxes from namespaces, overlayfs and seccomp")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
       "hutch runs untrusted code in sandboxes built straight from kernel facilities (user, pid, "
       "mount, net, uts, ipc and cgroup namespaces, overlayfs, seccomp), with no container "
       "engine and no VM. hutchd keeps sandboxes up behind a local HTTP API.")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "erofs-utils, e2fsprogs")
include(CPack)

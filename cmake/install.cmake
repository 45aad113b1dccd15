# cmake --install: the commands in bin/, their helpers in libexec/hutch/, the docs in
# share/doc/hutch, the systemd unit in lib/systemd/system. hutch and hutchd find their helpers
# beside themselves (the build tree) or in ../libexec/hutch/ (cli/main.cc helper_path,
# daemon/main.cc helper_binary): these destinations are fixed so that the two agree.
include(GNUInstallDirs)

install(TARGETS hutch hutchd RUNTIME DESTINATION bin)
install(TARGETS hutch-client hutch-egress hutch-image hutchd-zygote hutchd-bake RUNTIME DESTINATION libexec/hutch)
install(FILES README.md docs/api.md docs/design.md docs/security.md seccomp/default.json
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The unit names hutchd by its installed path, which is known only at install time
# (`cmake --install --prefix`, cpack's /usr): configured then, straight into the destination.
set(HUTCH_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "Where the systemd units go, relative to the install prefix")
install(CODE "
  set(unit \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${HUTCH_SYSTEMD_UNIT_DIR}/hutchd.service\")
  set(HUTCH_BINDIR \"\${CMAKE_INSTALL_PREFIX}/bin\")
  set(HUTCH_DOCDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DOCDIR}\")
  message(STATUS \"Installing: \${unit}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/packaging/hutchd.service.in\" \"\${unit}\" @ONLY)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${unit}\")
")

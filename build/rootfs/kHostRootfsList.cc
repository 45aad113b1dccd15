extern const char kHostRootfsList[];
const char kHostRootfsList[] = R"hutch_embed(# The embedded default rootfs "host": what a sandbox sees of the host's root filesystem.
# Everything comes read-only from the host with a per-sandbox copy-on-write layer on top.
#
#   show PATH        visible as on the host (inside a shown directory everything is visible)
#   empty PATH MODE  an empty directory, whatever the host has there
#
# In a directory that holds a shown or empty entry, every other host entry is hidden
# (an overlay whiteout): this is an allowlist, so what the host adds later stays hidden.
# The sandbox's own /proc, /dev and /tmp are mounted over their empty directories, and
# /etc/hostname, hosts, resolv.conf, passwd and group are generated for each sandbox.

show /usr
show /bin
show /sbin
show /lib
show /lib32
show /lib64
show /libx32

empty /dev 0755
empty /proc 0555
empty /tmp 1777
empty /root 0700
empty /home 0755
empty /run 0755
empty /var 0755
empty /opt 0755
empty /srv 0755
empty /mnt 0755
empty /media 0755

show /etc/alternatives
show /etc/bash.bashrc
show /etc/bindresvport.blacklist
show /etc/ca-certificates
show /etc/ca-certificates.conf
show /etc/debian_version
show /etc/gai.conf
show /etc/host.conf
show /etc/inputrc
show /etc/issue
show /etc/ld.so.cache
show /etc/ld.so.conf
show /etc/ld.so.conf.d
show /etc/locale.alias
show /etc/localtime
show /etc/magic
show /etc/magic.mime
show /etc/mime.types
show /etc/nsswitch.conf
show /etc/os-release
show /etc/profile
show /etc/profile.d
show /etc/protocols
show /etc/python3
show /etc/python3.11
show /etc/rpc
show /etc/services
show /etc/ssl/certs
show /etc/ssl/openssl.cnf
show /etc/terminfo
show /etc/timezone
show /etc/vim
)hutch_embed";

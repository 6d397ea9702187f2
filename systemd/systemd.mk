# systemd/systemd.mk - moshid as a system service: `make install`, the
# units, the man page, and the sd_notify module's flags and Check suite
# (daemon/service/notify.c, built into libdaemon.a: daemon/daemon.mk).
#
#   make install [PREFIX=/usr/local] [DESTDIR=] [UNITDIR=PREFIX/lib/systemd/system]
#
# Layout (all under DESTDIR):
#   PREFIX/bin/moshid, moshi-run, mimi-codec, moshid-mkmodel, moshid-voice-convert
#   PREFIX/lib/moshid/libmoshid-cuda.so          (when nvcc built it)
#   PREFIX/share/moshid/web/                     the browser client (daemon/web/, if present)
#   PREFIX/share/moshid/examples/                moshid.json, haproxy.cfg, nginx.conf
#   PREFIX/share/doc/moshid/                     README.md, docs/*.md
#   PREFIX/share/man/man8/moshid.8
#   UNITDIR/moshid.service, moshid@.service, moshid{,@}.service.d/cuda.conf
#   /etc/moshid/moshid.json                      the example, only where none exists
# The units, the man page and the example configuration name /usr/local in
# their paths; install rewrites that to PREFIX. UNITDIR: systemd reads
# /usr/lib/systemd/system and /usr/local/lib/systemd/system, so both usual
# prefixes work; /etc/systemd/system stays the administrator's (overrides,
# `systemctl edit`). For another PREFIX (/opt/moshid) give UNITDIR.
#
# The plugin: moshid looks in PREFIX/lib/moshid when it runs as
# PREFIX/bin/moshid (engine/base/plugin.c), so build/moshid is installed as
# it is, for any PREFIX, and build/moshid still finds
# build/libmoshid-cuda.so beside itself.

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR := $(PREFIX)/bin
PLUGINDIR := $(PREFIX)/lib/moshid
DATADIR := $(PREFIX)/share/moshid
DOCDIR := $(PREFIX)/share/doc/moshid
MANDIR := $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
# systemd's ConfigurationDirectory=moshid is /etc/moshid whatever PREFIX is.
SYSCONFDIR := /etc

INST_TOOLS := $(BUILD)/moshi-run $(BUILD)/mimi-codec $(BUILD)/moshid-mkmodel $(BUILD)/moshid-plan
INST_CU_PLUGIN := $(if $(CU_TARGETS),$(CU_PLUGIN))
INST_UNITS := systemd/moshid.service systemd/moshid@.service
INST_DOCS := README.md $(wildcard docs/*.md)
INST_EXAMPLES := config/moshid.json config/haproxy.cfg config/nginx.conf
# the browser client: every regular file under daemon/web/ but dot files
INST_WEB := $(shell find daemon/web -type f ! -name '.*' 2>/dev/null | sort)
# /usr/local in units, man page and examples -> PREFIX
INST_SED := sed -e 's\#/usr/local/\#$(PREFIX)/\#g'

install: $(BUILD)/moshid $(INST_TOOLS) $(INST_CU_PLUGIN) $(INST_UNITS) systemd/moshid-cuda.conf docs/moshid.8
	@echo "  INSTALL $(DESTDIR)$(PREFIX) (units in $(DESTDIR)$(UNITDIR))"
	$(Q)install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(DATADIR)/web $(DESTDIR)$(DATADIR)/examples \
	  $(DESTDIR)$(DOCDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(UNITDIR)/moshid.service.d \
	  $(DESTDIR)$(UNITDIR)/moshid@.service.d $(DESTDIR)$(SYSCONFDIR)/moshid
	$(Q)install -m 0755 $(BUILD)/moshid $(INST_TOOLS) $(DESTDIR)$(BINDIR)/
	$(Q)install -m 0755 engine/cli/moshid-voice-convert.py $(DESTDIR)$(BINDIR)/moshid-voice-convert
	$(Q)$(if $(INST_CU_PLUGIN),install -m 0755 $(INST_CU_PLUGIN) $(DESTDIR)$(PLUGINDIR)/,echo "  (no CUDA plugin: $(CU_OFF_WHY))")
	$(Q)for f in $(INST_WEB); do install -D -m 0644 "$$f" "$(DESTDIR)$(DATADIR)/web/$${f#daemon/web/}" || exit 1; done
	$(Q)for f in $(INST_EXAMPLES); do $(INST_SED) "$$f" > "$(DESTDIR)$(DATADIR)/examples/$${f##*/}" && \
	  chmod 0644 "$(DESTDIR)$(DATADIR)/examples/$${f##*/}" || exit 1; done
	$(Q)install -m 0644 $(INST_DOCS) $(DESTDIR)$(DOCDIR)/
	$(Q)$(INST_SED) docs/moshid.8 > $(DESTDIR)$(MANDIR)/man8/moshid.8 && chmod 0644 $(DESTDIR)$(MANDIR)/man8/moshid.8
	$(Q)for u in $(INST_UNITS); do $(INST_SED) "$$u" > "$(DESTDIR)$(UNITDIR)/$${u##*/}" && \
	  chmod 0644 "$(DESTDIR)$(UNITDIR)/$${u##*/}" || exit 1; done
	$(Q)for d in moshid.service.d moshid@.service.d; do install -m 0644 systemd/moshid-cuda.conf $(DESTDIR)$(UNITDIR)/$$d/cuda.conf || exit 1; done
	$(Q)conf=$(DESTDIR)$(SYSCONFDIR)/moshid/moshid.json; if [ -e "$$conf" ]; then \
	  echo "  (kept $$conf; the new example is $(DESTDIR)$(DATADIR)/examples/moshid.json)"; \
	  else install -m 0644 $(DESTDIR)$(DATADIR)/examples/moshid.json "$$conf"; fi
.PHONY: install

TEST_SCRIPTS += tests/cli/install.sh

# The sd_notify module: a Check suite against a test NOTIFY_SOCKET.
# daemon/service/notify.c is in DAEMON_SRCS (libdaemon.a; libsystemd is in
# DAEMON_LIBS); the suite links that same object alone (nothing else of the
# daemon), so no symbol is linked twice.
NOTIFY_LIBS = $(call pc_libs,libsystemd)
$(BUILD)/obj/daemon/service/notify.o: CPPFLAGS_ALL += $(call pc_cflags,libsystemd)
CHECK_SUITES += notify
CHECK_notify_DEPS = $(BUILD)/obj/daemon/service/notify.o
CHECK_notify_LIBS = $(NOTIFY_LIBS)

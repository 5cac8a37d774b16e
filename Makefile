# libhipfile.so, hipfile.h and hipfile.pc.
#
#   make                       # cargo build --release (all default members)
#   make install               # into $(PREFIX) (default /usr/local)
#   PREFIX=$HOME/.local make install
#   make uninstall
#   make test-c                # the C ABI tests (tests/c/run.sh)
#
# DESTDIR is honoured for staged installs. HIPFILE_LIB names an already built
# library to install instead of building (install-files does no build).

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
CARGO ?= cargo
HIPFILE_LIB ?= target/release/libhipfile.so
VERSION := 0.4.0
SONAME := libhipfile.so.0

.PHONY: all build install install-files uninstall test-c

all: build

build:
	$(CARGO) build --release -p hipfile-capi

install: build
	$(MAKE) install-files

install-files:
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(HIPFILE_LIB) $(DESTDIR)$(LIBDIR)/libhipfile.so.$(VERSION)
	ln -sfn libhipfile.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sfn $(SONAME) $(DESTDIR)$(LIBDIR)/libhipfile.so
	install -m 0644 include/hipfile.h $(DESTDIR)$(INCLUDEDIR)/hipfile.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    hipfile.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/hipfile.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/hipfile.pc

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libhipfile.so $(DESTDIR)$(LIBDIR)/$(SONAME) \
	      $(DESTDIR)$(LIBDIR)/libhipfile.so.$(VERSION) \
	      $(DESTDIR)$(INCLUDEDIR)/hipfile.h $(DESTDIR)$(PKGCONFIGDIR)/hipfile.pc

test-c:
	tests/c/run.sh

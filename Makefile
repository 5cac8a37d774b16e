# libhipfile.so (hipFile 0.5) and libcufile.so.0 (NVIDIA cuFile), their
# headers, hipfile.pc and the CMake package `hipfile` (target hip::hipfile).
#
#   make                       # cargo build --release of both libraries
#   make install               # into $(PREFIX) (default /usr/local)
#   PREFIX=$HOME/.local make install
#   make uninstall
#   make test-c                # the C ABI tests (tests/c/run.sh, tests/c/cufile/run.sh)
#
# DESTDIR is honoured for staged installs. HIPFILE_LIB / CUFILE_LIB name
# already built libraries to install instead of building (the install-*
# targets do no build). install-hipfile and install-cufile install one each.
#
# Installing libcufile.so.0 into a directory the dynamic loader searches
# makes every cuFile program there use hipfs; `hipfs check` says which
# libcufile a program would load.

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
CMAKEDIR ?= $(LIBDIR)/cmake/hipfile
CARGO ?= cargo
HIPFILE_LIB ?= target/release/libhipfile.so
CUFILE_LIB ?= target/release/libcufile.so
VERSION := 0.5.0
SONAME := libhipfile.so.0
CUFILE_SONAME := libcufile.so.0

.PHONY: all build install install-files install-hipfile install-cufile uninstall test-c

all: build

build:
	$(CARGO) build --release -p hipfile-capi -p hipfs-cufile

install: build
	$(MAKE) install-files

install-files: install-hipfile install-cufile

install-hipfile:
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(CMAKEDIR)
	install -m 0755 $(HIPFILE_LIB) $(DESTDIR)$(LIBDIR)/libhipfile.so.$(VERSION)
	ln -sfn libhipfile.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sfn $(SONAME) $(DESTDIR)$(LIBDIR)/libhipfile.so
	install -m 0644 include/hipfile.h $(DESTDIR)$(INCLUDEDIR)/hipfile.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    hipfile.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/hipfile.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/hipfile.pc
	sed -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|g' \
	    cmake/hipfile-config.cmake.in > $(DESTDIR)$(CMAKEDIR)/hipfile-config.cmake
	sed -e 's|@VERSION@|$(VERSION)|g' \
	    cmake/hipfile-config-version.cmake.in > $(DESTDIR)$(CMAKEDIR)/hipfile-config-version.cmake
	chmod 0644 $(DESTDIR)$(CMAKEDIR)/hipfile-config.cmake $(DESTDIR)$(CMAKEDIR)/hipfile-config-version.cmake

install-cufile:
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)
	install -m 0755 $(CUFILE_LIB) $(DESTDIR)$(LIBDIR)/libcufile.so.$(VERSION)
	ln -sfn libcufile.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(CUFILE_SONAME)
	ln -sfn $(CUFILE_SONAME) $(DESTDIR)$(LIBDIR)/libcufile.so
	install -m 0644 include/cufile.h $(DESTDIR)$(INCLUDEDIR)/cufile.h

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libhipfile.so $(DESTDIR)$(LIBDIR)/$(SONAME) \
	      $(DESTDIR)$(LIBDIR)/libhipfile.so.$(VERSION) \
	      $(DESTDIR)$(INCLUDEDIR)/hipfile.h $(DESTDIR)$(PKGCONFIGDIR)/hipfile.pc \
	      $(DESTDIR)$(CMAKEDIR)/hipfile-config.cmake $(DESTDIR)$(CMAKEDIR)/hipfile-config-version.cmake \
	      $(DESTDIR)$(LIBDIR)/libcufile.so $(DESTDIR)$(LIBDIR)/$(CUFILE_SONAME) \
	      $(DESTDIR)$(LIBDIR)/libcufile.so.$(VERSION) $(DESTDIR)$(INCLUDEDIR)/cufile.h
	-rmdir $(DESTDIR)$(CMAKEDIR) 2>/dev/null

test-c:
	tests/c/run.sh
	tests/c/cufile/run.sh

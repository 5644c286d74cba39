// libvision.so, the library `cmake --install` ships (vision::vision to find_package users): every object of the static
// library `vision`, linked whole (each kernel family registers itself from a static initialiser that nothing else
// references). This file only gives the target a source of its own.

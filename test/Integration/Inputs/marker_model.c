/* A shared object that announces being loaded: its constructor runs inside
 * dlopen() and creates the file named by $KILN_MARKER. artifact-trust.test
 * puts it into an artifact as model.so to prove that refused artifacts are
 * never dlopen()ed. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void announce(void) {
  const char *path = getenv("KILN_MARKER");
  if (path) {
    FILE *f = fopen(path, "w");
    if (f)
      fclose(f);
  }
  fputs("marker model.so loaded\n", stderr);
}

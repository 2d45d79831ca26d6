/* Linked against libnest_lib.so (see nest_lib.c); main is reached only when the plug-in
 * did not end the process. */
#include <stdio.h>
int main(void) { printf("main reached\n"); return 0; }

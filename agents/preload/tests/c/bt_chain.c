/* bt_chain.c - a known call chain for sampled backtraces (MEMWATCH_BACKTRACE_EVERY_BYTES):
 * main -> outer_caller -> middle_caller -> leaf_allocator -> hipMalloc (direct linking to
 * the test runtime). Built with -fno-omit-frame-pointer -fno-optimize-sibling-calls so
 * the frame-pointer chain names every function. Keeps the allocations (leaks) so the
 * report lists them with their stacks. Prints "B ptr=0x.. size=N" per allocation. */
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

int hipMalloc(void **p, size_t size);

__attribute__((noinline)) void *leaf_allocator(size_t size) {
    void *p = NULL;
    int r = hipMalloc(&p, size);
    printf("B ptr=%p size=%zu result=%d\n", p, size, r);
    return p;
}

__attribute__((noinline)) void *middle_caller(size_t size) {
    void *p = leaf_allocator(size);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) void *outer_caller(size_t size) {
    void *p = middle_caller(size * 2);
    __asm__ volatile("" ::: "memory");
    return p;
}

int main(void) {
    void *a = outer_caller(1 << 20);
    void *b = leaf_allocator(4096);
    return a && b ? 0 : 1;
}

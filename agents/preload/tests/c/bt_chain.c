/* bt_chain.c - a known call chain for sampled backtraces (MEMWATCH_BACKTRACE_EVERY_BYTES):
 * main -> outer_caller -> middle_caller -> leaf_allocator -> hipMalloc (direct linking to
 * the test runtime), and the same from a second thread (thread_main, 8 MiB). Built with -fno-omit-frame-pointer -fno-optimize-sibling-calls so
 * the frame-pointer chain names every function. Keeps the allocations (leaks) so the
 * report lists them with their stacks. Prints "B ptr=0x.. size=N" per allocation. */
#include <pthread.h>
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

__attribute__((noinline)) void *thread_main(void *arg) {
    void *p = outer_caller(4 << 20);
    __asm__ volatile("" ::: "memory");
    return arg ? p : p;
}

int main(void) {
    void *a = outer_caller(1 << 20);
    void *b = leaf_allocator(4096);
    pthread_t th;
    void *c = NULL;
    if (pthread_create(&th, NULL, thread_main, NULL) != 0 || pthread_join(th, &c) != 0) return 2;
    return a && b && c ? 0 : 1;
}

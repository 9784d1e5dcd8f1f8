// Does OpenBLAS's thread count change the bits of an sgemm? For a few shapes, the same product
// (a (m, k) @ b (n, k)^T, row-major, as a convolution's weight gradient) with 1 and then 2
// OpenBLAS threads; prints how many outputs differ. Why kernels/cpu/gemm.h leases the count.
//   cc -O2 bench/openblas_thread_bits.c -I/usr/include/x86_64-linux-gnu/openblas-pthread
//      -lopenblas -o /tmp/openblas_thread_bits && /tmp/openblas_thread_bits   (one line)
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void product(int threads, int m, int n, int k, const float* a, const float* b, float* c) {
  openblas_set_num_threads(threads);
  memset(c, 0, sizeof(float) * (size_t)m * (size_t)n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 1.0f, c, n);
}

int main(void) {
  static const int shapes[][3] = {
      {8, 36, 784}, {8, 36, 1024}, {8, 36, 12544}, {16, 72, 784}, {64, 576, 3136}};
  printf("OpenBLAS %s kernels\n", openblas_get_corename());
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
    float* a = malloc(sizeof(float) * (size_t)m * (size_t)k);
    float* b = malloc(sizeof(float) * (size_t)n * (size_t)k);
    float* one = malloc(sizeof(float) * (size_t)m * (size_t)n);
    float* two = malloc(sizeof(float) * (size_t)m * (size_t)n);
    srand(1);
    for (int i = 0; i < m * k; ++i)
      a[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < n * k; ++i)
      b[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    product(1, m, n, k, a, b, one);
    product(2, m, n, k, a, b, two);
    int differ = 0;
    for (int i = 0; i < m * n; ++i)
      differ += memcmp(&one[i], &two[i], sizeof(float)) != 0;
    printf("m %d n %d k %d (m n k = %.0f): %d of %d outputs differ between 1 and 2 threads\n", m, n,
           k, (double)m * n * k, differ, m * n);
    free(a);
    free(b);
    free(one);
    free(two);
  }
  return 0;
}

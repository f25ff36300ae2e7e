// C += A * B (PolyBench gemm, integer). N is the problem size (schedlab sets it).
#define N 4

void gemm(int A[N][N], int B[N][N], int C[N][N]) {
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < N; j++) {
      int acc = C[i][j];
      for (int k = 0; k < N; k++)
        acc += A[i][k] * B[k][j];
      C[i][j] = acc;
    }
  }
}

// C = alpha * A * B + beta * C (PolyBench gemm, float). N is the problem size.
#define N 4

void gemm_float(float A[N][N], float B[N][N], float C[N][N], float alpha, float beta) {
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < N; j++) {
      float acc = C[i][j] * beta;
      for (int k = 0; k < N; k++)
        acc += alpha * A[i][k] * B[k][j];
      C[i][j] = acc;
    }
  }
}

// y = A^T (A x) (PolyBench atax, integer)
#define N 4

void atax(int A[N][N], int x[N], int y[N]) {
  for (int i = 0; i < N; i++) {
    int tmp = 0;
    for (int j = 0; j < N; j++)
      tmp += A[i][j] * x[j];
    for (int j = 0; j < N; j++)
      y[j] = y[j] + A[i][j] * tmp;
  }
}

// y = alpha A x + beta B x (PolyBench gesummv, integer)
#define N 4

void gesummv(int A[N][N], int B[N][N], int x[N], int y[N], int alpha, int beta) {
  for (int i = 0; i < N; i++) {
    int ta = 0, tb = 0;
    for (int j = 0; j < N; j++) {
      int xj = x[j];
      ta += A[i][j] * xj;
      tb += B[i][j] * xj;
    }
    y[i] = alpha * ta + beta * tb;
  }
}

// y = A x
#define N 4

void matvec(int A[N][N], int x[N], int y[N]) {
  for (int i = 0; i < N; i++) {
    int s = 0;
    for (int j = 0; j < N; j++)
      s += A[i][j] * x[j];
    y[i] = s;
  }
}

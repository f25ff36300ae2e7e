// D = (A B) C (PolyBench 2mm, integer): the second product reads what the first wrote
#define N 4

void mm2(int A[N][N], int B[N][N], int C[N][N], int T[N][N], int D[N][N]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      int s = 0;
      for (int k = 0; k < N; k++)
        s += A[i][k] * B[k][j];
      T[i][j] = s;
    }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      int s = 0;
      for (int k = 0; k < N; k++)
        s += T[i][k] * C[k][j];
      D[i][j] = s;
    }
}

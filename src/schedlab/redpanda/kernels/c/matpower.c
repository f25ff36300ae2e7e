// matrix power on a sparse (coordinate-format) matrix, after Dynamatic's matrix_power:
// x[r][row[i]] += a[i] * x[r-1][col[i]] for r = 1..N-1 (indirect loads and stores)
#define N 4
#define NN (4 * N)

void matpower(int x[N][N], int row[NN], int col[NN], int a[NN]) {
  for (int r = 1; r < N; r++)
    for (int i = 0; i < NN; i++)
      x[r][row[i]] += a[i] * x[r - 1][col[i]];
}

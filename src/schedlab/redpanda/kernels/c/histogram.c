// histogram: h[x[i]] += 1 (indirect, memory-irregular)
#define N 4
#define NN (4 * N)

void histogram(int x[NN], int h[8]) {
  for (int i = 0; i < NN; i++)
    h[x[i]] += 1;
}

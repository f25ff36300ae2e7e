// Dynamatic's gsum (integer form): a polynomial of every non-negative element, summed
#define N 4
#define NN (4 * N)

int gsum(int a[NN]) {
  int s = 0;
  for (int i = 0; i < NN; i++) {
    int d = a[i];
    if (d >= 0)
      s += (((((d + 3) * d + 2) * d + 1) * d + 5) * d + 4) * d + 7;
  }
  return s;
}

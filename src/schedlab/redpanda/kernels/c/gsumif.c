// Dynamatic's gsumif (integer form): two polynomials chosen per element by a branch
#define N 4
#define NN (4 * N)

int gsumif(int a[NN]) {
  int s = 0;
  for (int i = 0; i < NN; i++) {
    int d = a[i];
    if (d >= 0) {
      int p;
      if (d < 5)
        p = ((d + 3) * d + 2) * d;
      else
        p = ((d * 2 + 1) * d - 4) * d + 7;
      s += p;
    }
  }
  return s;
}

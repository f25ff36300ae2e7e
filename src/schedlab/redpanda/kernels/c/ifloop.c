// control-rich loop: b[i] = a[i] > 0 ? 3 a[i] + 1 : -a[i]; returns the count of positives
#define N 4
#define NN (4 * N)

int ifloop(int a[NN], int b[NN]) {
  int count = 0;
  for (int i = 0; i < NN; i++) {
    int v = a[i];
    if (v > 0) {
      b[i] = 3 * v + 1;
      count++;
    } else {
      b[i] = -v;
    }
  }
  return count;
}

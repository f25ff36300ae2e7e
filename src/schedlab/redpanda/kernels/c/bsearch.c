// binary search of every key in q[] over the sorted a[]; found index (or -1) into r[]
#define N 4
#define NN (4 * N)

void bsearch(int a[NN], int q[N], int r[N]) {
  for (int i = 0; i < N; i++) {
    int key = q[i];
    int lo = 0, hi = NN, found = -1;
    while (lo < hi && found < 0) {
      int mid = (lo + hi) >> 1;
      int v = a[mid];
      if (v == key)
        found = mid;
      if (v < key)
        lo = mid + 1;
      if (v > key)
        hi = mid;
    }
    r[i] = found;
  }
}

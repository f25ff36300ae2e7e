// Euclid's gcd of every pair (a[i], b[i]) into g[i] (data-dependent trip counts)
func.func @gcd(%a: memref<@N@xi32>, %b: memref<@N@xi32>, %g: memref<@N@xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @N@ : index
  %z = arith.constant 0 : i32
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %a[%i] : memref<@N@xi32>
    %y = memref.load %b[%i] : memref<@N@xi32>
    %res:2 = scf.while (%u = %x, %v = %y) : (i32, i32) -> (i32, i32) {
      %nz = arith.cmpi ne, %v, %z : i32
      scf.condition(%nz) %u, %v : i32, i32
    } do {
    ^bb0(%p: i32, %q: i32):
      %m = arith.remsi %p, %q : i32
      scf.yield %q, %m : i32, i32
    }
    memref.store %res#0, %g[%i] : memref<@N@xi32>
  }
  func.return
}

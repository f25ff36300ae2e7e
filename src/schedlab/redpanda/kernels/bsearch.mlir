// binary search of every key in q[] over the sorted a[]; found index (or -1) into r[]
func.func @bsearch(%a: memref<@NN@xi32>, %q: memref<@N@xi32>, %r: memref<@N@xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @N@ : index
  %lo0 = arith.constant 0 : i32
  %hi0 = arith.constant @NN@ : i32
  %m1 = arith.constant -1 : i32
  %one = arith.constant 1 : i32
  scf.for %i = %c0 to %n step %c1 {
    %key = memref.load %q[%i] : memref<@N@xi32>
    %res:3 = scf.while (%lo = %lo0, %hi = %hi0, %found = %m1) : (i32, i32, i32) -> (i32, i32, i32) {
      %open = arith.cmpi slt, %lo, %hi : i32
      %missing = arith.cmpi slt, %found, %lo0 : i32
      %go = arith.andi %open, %missing : i1
      scf.condition(%go) %lo, %hi, %found : i32, i32, i32
    } do {
    ^bb0(%l: i32, %h: i32, %f: i32):
      %sum = arith.addi %l, %h : i32
      %mid = arith.shrsi %sum, %one : i32
      %midx = arith.index_cast %mid : i32 to index
      %v = memref.load %a[%midx] : memref<@NN@xi32>
      %lt = arith.cmpi slt, %v, %key : i32
      %eq = arith.cmpi eq, %v, %key : i32
      %mp = arith.addi %mid, %one : i32
      %nl = arith.select %lt, %mp, %l : i32
      %gt = arith.cmpi sgt, %v, %key : i32
      %nh = arith.select %gt, %mid, %h : i32
      %nf = arith.select %eq, %mid, %f : i32
      scf.yield %nl, %nh, %nf : i32, i32, i32
    }
    memref.store %res#2, %r[%i] : memref<@N@xi32>
  }
  func.return
}

// CSR sparse matrix-vector product (data-dependent loop bounds and gathers)
func.func @spmv(%rowptr: memref<@N1@xi32>, %col: memref<@NN@xi32>, %val: memref<@NN@xi32>, %x: memref<@N@xi32>, %y: memref<@N@xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @N@ : index
  %z = arith.constant 0 : i32
  scf.for %i = %c0 to %n step %c1 {
    %ip = arith.addi %i, %c1 : index
    %lo32 = memref.load %rowptr[%i] : memref<@N1@xi32>
    %hi32 = memref.load %rowptr[%ip] : memref<@N1@xi32>
    %lo = arith.index_cast %lo32 : i32 to index
    %hi = arith.index_cast %hi32 : i32 to index
    %s = scf.for %k = %lo to %hi step %c1 iter_args(%acc = %z) -> (i32) {
      %cv = memref.load %col[%k] : memref<@NN@xi32>
      %c = arith.index_cast %cv : i32 to index
      %v = memref.load %val[%k] : memref<@NN@xi32>
      %xv = memref.load %x[%c] : memref<@N@xi32>
      %p = arith.muli %v, %xv : i32
      %t = arith.addi %acc, %p : i32
      scf.yield %t : i32
    }
    memref.store %s, %y[%i] : memref<@N@xi32>
  }
  func.return
}

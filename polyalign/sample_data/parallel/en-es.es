El tren a Sevilla sale a las ocho y media.
¿Podría decirme dónde está la farmacia más cercana?
Mi abuela hace la mejor tarta de manzana del pueblo.
Lleva lloviendo desde el martes.
Tenemos que comprar leche, huevos y una barra de pan.
Laura trabaja de enfermera en el hospital de la ciudad.
¿Cuánto cuesta esta chaqueta?
El museo cierra los lunes.
Mi hermano es tres años mayor que yo.
Otra vez me olvidé el paraguas en la oficina.
¿Prefieres té o café por la mañana?
Los niños están jugando al fútbol en el parque.
Nuestro vuelo se retrasó dos horas por culpa de la niebla.
Ella lee al menos un libro cada semana.
La sopa está demasiado caliente para comerla ahora.
¿A qué hora abre el supermercado los domingos?
Pedro perdió las llaves de camino a casa.
El río se congela todos los inviernos.
Querría una mesa para cuatro, por favor.
La batería de mi móvil se gasta muy rápido.
La profesora nos pidió que escribiéramos una redacción sobre nuestro verano.
¿Hay algún autobús que vaya al aeropuerto?
El agua hierve a cien grados centígrados.
Pasamos el fin de semana en la playa con nuestros primos.
Lleva dos años aprendiendo japonés.
La reunión empieza a las diez, así que no lleguéis tarde, por favor.
Mi hermana acaba de tener una niña.
Esta calle se vuelve muy ruidosa por la noche.
¿Puedo pagar con tarjeta?
El médico me dijo que bebiera más agua.
Carmen ganó el torneo local de ajedrez el año pasado.
Un año tiene doce meses.
Estoy cansado porque ayer trabajé hasta tarde.
¿Dónde has puesto las tijeras?
La panadería de la esquina vende cruasanes recién hechos.
Nuestros vecinos tienen un perro negro muy grande.
El concierto se canceló en el último momento.
Quedamos delante del cine a las siete.
La Luna gira alrededor de la Tierra en unos veintisiete días.
No entiendo nada este ejercicio.
Mi padre arregla bicicletas viejas como pasatiempo.
Hoy hace mucho viento, así que sujétate el sombrero.
¿Cuánto se tarda en llegar a Madrid en coche?
La empresa ha contratado a cinco ingenieros nuevos este mes.
Normalmente me acuesto sobre las once.
Los tomates de nuestro huerto son muy dulces.
¿Has estado alguna vez en México?
Se rompió el brazo esquiando.
La biblioteca tiene más de cincuenta mil libros.
Por favor, apaga las luces cuando salgas.
Ana y Luis se casaron en junio.
El precio de la gasolina ha vuelto a subir esta semana.
No encuentro mis gafas por ningún lado.
El gato está durmiendo en el sofá.
¿De qué andén sale el tren a Valencia?
Nuestro equipo perdió el partido tres a uno.
Habla inglés, francés y un poco de alemán.
El guía del museo explicó la historia del castillo.
Tengo que cargar el portátil antes de la presentación.
No te olvides de regar las plantas mientras estoy fuera.
En enero las montañas están cubiertas de nieve.
¿Por qué te ríes?
Mi tío vive en una granja con ovejas y cabras.
El puente nuevo se abrirá la próxima primavera.
Me alegro mucho de que hayas venido a vernos.
El restaurante solo sirve paella los jueves.
Marta estudia biología en la universidad.
¿Podría hablar un poco más despacio, por favor?
El bebé lloró toda la noche.
Caminamos por la costa hasta la puesta de sol.
Este ordenador tiene cinco años, pero todavía funciona bien.
¿Cuántas personas viven en este edificio?
Tengo cita con el dentista el viernes.
La nevera está casi vacía.
Javier siempre llega diez minutos antes.
En otoño las hojas se vuelven rojas y amarillas.
¿Está libre este asiento?
Mi madre me enseñó a cocinar arroz.
La policía cortó la carretera después del accidente.
Me dan miedo las arañas.
El festival atrae a miles de visitantes cada agosto.
Deberíamos irnos ya si queremos coger el último autobús.
La habitación del hotel tenía vistas al mar.
¿Quién escribió esta carta?
Las plantas necesitan luz solar para crecer.
Mi prima Elena toca el violín en una orquesta.
La tienda me hizo un descuento del veinte por ciento.
Estoy un poco nervioso por el examen de mañana.
El casco antiguo tiene calles estrechas y plazas pequeñas.
¿Qué vas a hacer este verano?
Se bebe dos tazas de café antes de desayunar.
La impresora de la segunda planta está rota.
Nuestro hijo empieza la primaria en septiembre.
La tormenta derribó varios árboles del parque.
En la ciudad prefiero ir andando a ir en coche.
¿Te acordaste de cerrar la puerta con llave?
Sofía corre cinco kilómetros cada mañana.
Los romanos construyeron este acueducto hace casi dos mil años.
Este vestido me queda un poco pequeño.
Nunca había visto tantas estrellas en el cielo.
El gerente le devolverá la llamada esta tarde.
¿Dónde puedo comprar un billete de metro?
Mi fruta favorita es el mango.
Los estudiantes están preparando un proyecto sobre energías renovables.
Hacía tanto frío que se congelaron las tuberías.
El sábado celebramos el noventa cumpleaños de mi abuelo.
Tomás arregló el grifo de la cocina que goteaba.
¿Estás seguro de que esta es la dirección correcta?
La actualización del programa tardó casi una hora.
Hay un lago pequeño detrás del colegio.
Lo siento, no he oído lo que has dicho.
Compró flores para el cumpleaños de su madre.
El partido se retransmitirá en directo por televisión.
Nuestra oficina se trasladó a la quinta planta.
¿Con qué frecuencia visitas a tus padres?
La ballena es el animal más grande del planeta.
Dejé el coche en el aparcamiento subterráneo.
Deberías ponerte protector solar incluso los días nublados.
El camarero nos trajo la cuenta sin que se la pidiéramos.
Mis abuelos se conocieron en un baile en 1962.
Por favor, envíame el informe antes del jueves.
El camino a la cascada es empinado y pedregoso.
¿Cuál es la capital de Argentina?
Diego es alérgico a los frutos secos.
Los niños hicieron un castillo de arena cerca del agua.
Tengo dos entradas para el teatro esta noche.
El ayuntamiento tiene previsto plantar mil árboles.
¿Por qué no me llamaste ayer?
Esta receta lleva tres dientes de ajo.
El ascensor no funciona, así que subimos por las escaleras.
Pidió perdón por haber sido maleducado.
Las abejas son esenciales para polinizar los cultivos.
Lucía está ahorrando para comprarse una moto.
El hospital busca voluntarios.
¿Me ayudas a llevar estas cajas?
El cielo se volvió naranja justo antes de la tormenta.
Empecé un trabajo nuevo hace dos semanas.
Los zapatos que pedí por internet nunca llegaron.
En verano el sol no se pone hasta las diez de la noche.
¿Quién va a recoger a los niños del colegio?
Me duele la rodilla cuando bajo las escaleras.
El pueblo solo tiene una tienda y un bar.
Vimos un documental sobre pingüinos.
Los resultados del examen se publicarán el lunes.
Creo que esta noche va a nevar.
Raúl juega al baloncesto dos veces por semana.
La contraseña debe tener al menos ocho caracteres.
¿Quieres algo de beber?
Los viernes el mercado está lleno de pescado fresco.
Mi hija quiere ser astronauta.
Esta mañana el tráfico era horrible.
Vivo en esta ciudad desde hace quince años.
El bizcocho tiene que estar cuarenta minutos en el horno.
¿Está lejos de aquí la estación de tren?
Los científicos descubrieron una nueva especie de rana.
Ella siempre sube por las escaleras en lugar de coger el ascensor.
Se nos acabó el azúcar, así que fui a la tienda.
El castillo se alza sobre una colina encima del pueblo.
No te preocupes, todo saldrá bien.
La conexión a internet de este hotel es muy lenta.
Visité Lisboa por primera vez en 2019.
Nuestro profesor nos puso muchos deberes para las vacaciones.
¿Cómo se dice «gracias» en portugués?
A los agricultores les preocupa la falta de lluvia.
Mis padres se jubilan el año que viene.
Hay una falta de ortografía en el segundo párrafo.
Pedí una ensalada y un vaso de zumo de naranja.
El autobús iba tan lleno que tuve que ir de pie.
Isabel canta en un coro todos los miércoles por la tarde.
¿Sabes nadar?
El terremoto dañó muchas casas antiguas.
Pintamos el salón de azul claro.
La cola de correos era muy larga.
Te espero en la entrada.
El corazón humano late unas setenta veces por minuto.
Mi jefe está de vacaciones hasta final de mes.
A nuestro perro le dan miedo los fuegos artificiales.
¿Qué cenaste anoche?
El ayuntamiento está al lado de la iglesia.
Pablo se olvidó del cumpleaños de su amigo y se sintió fatal.
Es más fácil aprender un idioma cuando eres joven.
Los ciclistas subieron la montaña bajo la lluvia.
¿Me puede recomendar un buen restaurante por aquí cerca?
La fábrica cerró después de cuarenta años.
Necesito unas zapatillas de correr nuevas.
Los niños se quedaron dormidos en el asiento de atrás del coche.
Elena ha llamado para decir que llegará tarde.
¿Cuántos idiomas hablas?
El mar estaba en calma y el agua estaba caliente.
Tengo que renovar el pasaporte antes del viaje.
La nueva ley entra en vigor el uno de enero.
Mis amigos me dieron una sorpresa con una fiesta.
Los naranjos están en flor.
Perdone, ¿se va por aquí a la playa?
Lleva diez años trabajando en el banco.
Este museo tiene cuadros de Goya y Velázquez.
Vamos a volver a pintar la valla el fin de semana que viene.
La leche se ha puesto mala.
Estoy buscando un regalo para mi sobrino.
La luz del Sol tarda unos ocho minutos en llegar hasta nosotros.
Nuestros abuelos nunca tuvieron televisión en casa.
¿Qué tiempo hace hoy en Barcelona?
Echó demasiada sal a la salsa.
El gimnasio abre las veinticuatro horas del día.
Mi compañero Andrés es de Colombia.
Gira a la izquierda en el semáforo y luego sigue todo recto.
Los primeros libros impresos aparecieron en Europa en el siglo XV.
Lo siento, pero no tenemos esa talla.
Están construyendo un hospital nuevo en las afueras de la ciudad.
¿Te gustó la película?
A mi hermano pequeño le da miedo la oscuridad.
La verdura fresca es más barata en el mercado que en el supermercado.
El volcán entró en erupción por última vez hace más de un siglo.
Esperamos a unos sesenta invitados en la boda.
No puedo dormir cuando hace tanto calor.
El profesor habla tan rápido que nadie puede tomar apuntes.
¿Dónde naciste?
La aerolínea perdió mi maleta en Fráncfort.
Nuestra gata tuvo cuatro gatitos anoche.
Por fin se me pasó el dolor de cabeza después de comer.
La dependienta fue muy paciente con nosotros.
En mi familia a todos nos encanta ver ciclismo en la tele.
El puente mide dos kilómetros de largo.
¿Has terminado de leer el periódico?
Nevó tanto que cerraron los colegios.
Quisiera reservar una habitación doble para tres noches.
Clara y su marido abrieron una pequeña librería.
El nuevo móvil tiene una cámara mucho mejor.
Come despacio, hay tiempo de sobra.
Los delfines se comunican entre sí mediante sonidos.
Manuel suspendió el examen de conducir dos veces.
¿A qué hora sales del trabajo?
El viento me arrancó el paraguas de la mano.
Comimos en un restaurante pequeño junto al puerto.
Mi abuela todavía escribe cartas a mano.
Las entradas se agotaron en menos de una hora.
Estoy orgulloso de ti.
Los Pirineos separan España de Francia.
Puedes dejar el abrigo en el armario.
¿Cuántos años tiene tu hija?
Los excursionistas se perdieron en el bosque durante varias horas.
Normalmente compro el pan en la panadería que hay cerca de la estación.
La ingeniera explicó cómo produce electricidad la presa.
No toques el horno, que todavía está caliente.
Nuestro equipo ganó el campeonato regional en 2021.
Las calles estaban vacías la mañana de Navidad.
Mi tía vive en un piso con una terraza grande.
¿El desayuno está incluido en el precio?
Sara está resfriada y hoy se queda en casa.
Los peces de este río están protegidos.
No me gustan las películas de terror.
El centro de la ciudad está cerrado al tráfico los domingos.
¿Cuándo empiezan las rebajas de verano?
Los primeros ordenadores ocupaban habitaciones enteras.
Plantamos patatas y cebollas en el huerto.
El entrenador estaba contento con el rendimiento del equipo.
Perdí la cartera, pero alguien la encontró y me la devolvió.
¿Podrías cerrar la ventana? Empieza a hacer frío.
Mi mejor amiga se mudó a Canadá el año pasado.
Los soldados volvieron a casa después de la guerra.
En la plaza mayor hay una farmacia abierta toda la noche.
Siempre se le olvida dónde ha aparcado el coche.
Por la mañana todos los girasoles del campo miran hacia el este.
¿Vienes a la fiesta del sábado?
Nuestra lavadora hace un ruido raro.
Alberto hizo la cena para toda la familia.
El museo ofrece entrada gratuita el primer domingo de cada mes.
Necesito practicar la pronunciación.
El tejado empezó a gotear durante la tormenta.
Mi hijo sacó la nota más alta de su clase.
¿Qué autobús tengo que coger para ir a la universidad?
Los elefantes pueden vivir más de sesenta años.
La abogada leyó el contrato con mucho cuidado.
Necesitamos más sillas para los invitados.
Voy al gimnasio después del trabajo.
El antiguo faro es ahora un pequeño museo.
Carlos no come ni carne ni pescado.
Tardo veinte minutos en ir andando al trabajo.
El cuadro fue robado en 1911 y encontrado dos años después.
¿Qué harías si te tocara la lotería?
El té está en el armario que hay encima del fregadero.
Se me cayó el móvil a la piscina.
Las calles están adornadas con luces para las fiestas.
No sabía que supieras tocar la guitarra.
La mayoría de los alumnos aprobaron el examen.
La enfermera me tomó la tensión.
Subimos a pie hasta la cima de la montaña en cuatro horas.
¿Qué tal tu viaje a Perú?
El panadero se levanta a las cuatro todas las mañanas.
Ya no quedan entradas para la función del viernes.
El loro sabe decir algunas palabras en español.
Mi mujer y yo vamos a bailar todos los sábados por la noche.
La impresora se ha quedado sin papel.
El otoño es mi estación favorita.
¿Me puedo probar estos pantalones?
El río inundó la parte baja del pueblo.
Irene está escribiendo una novela sobre su infancia.
Nos quedamos en casa por la lluvia tan fuerte.
Muchas gracias por tu ayuda.
La peluquera me cortó el pelo demasiado corto.
